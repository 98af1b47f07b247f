//! What the commands print: an admission table (`admit -o table`, `pods`)
//! and JSON (every answer's contract form). Shared by the in-process
//! commands and the daemon's client.

use topomgr_contract::api::{Admission, Attachments};

use super::text::{field, Columns};

/// The columns of an admission table (`pods` adds `CGROUP`).
const POD_COLUMNS: [&str; 9] = [
    "POD",
    "QOS",
    "ADMITTED",
    "CONTAINER",
    "AFFINITY",
    "PREFERRED",
    "CPUS",
    "MEMS",
    "DEVICES",
];

/// The table of admissions, one row per container (one per rejected pod);
/// with `cgroups`, a `CGROUP` column from the daemon's attachments.
pub(crate) fn print_table(pods: &[Admission], cgroups: Option<&Attachments>) {
    let mut header = POD_COLUMNS.to_vec();
    if cgroups.is_some() {
        header.push("CGROUP");
    }
    let mut table = Columns::new(&header);
    for p in pods {
        let pod = format!("{}/{}", field(&p.namespace), field(&p.name));
        if !p.admitted {
            table.row(vec![
                pod,
                p.qos.as_str().to_owned(),
                "no".to_owned(),
                format!(
                    "{}: {}",
                    field(p.reason.as_deref().unwrap_or("")),
                    field(p.message.as_deref().unwrap_or(""))
                ),
            ]);
            continue;
        }
        for c in &p.containers {
            let devices: Vec<String> = c
                .devices
                .iter()
                .map(|(k, v)| format!("{}={}", field(k), field(&v.join(","))))
                .collect();
            let cpus = if c.cpus.is_empty() {
                "-".to_string()
            } else if c.exclusive {
                format!("{}*", c.cpus)
            } else {
                c.cpus.to_string()
            };
            let mut row = vec![
                pod.clone(),
                p.qos.as_str().to_owned(),
                "yes".to_owned(),
                field(&c.name).into_owned(),
                c.affinity.map_or("any".to_string(), |m| m.to_string()),
                c.preferred.to_string(),
                cpus,
                if c.mems.is_empty() {
                    "-".to_string()
                } else {
                    c.mems.to_string()
                },
                if devices.is_empty() {
                    "-".to_string()
                } else {
                    devices.join(" ")
                },
            ];
            if let Some(cgroups) = cgroups {
                row.push(
                    cgroups
                        .get(&p.uid)
                        .and_then(|by_container| by_container.get(&c.name))
                        .map_or_else(|| "-".to_owned(), |path| field(path).into_owned()),
                );
            }
            table.row(row);
        }
    }
    print!("{}", table.render());
}

/// Print `value` as pretty JSON (the contract's form of every answer).
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
