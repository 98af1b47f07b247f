//! The CLI side of the daemon: `topomgr pods`, `release`, `attach`, and
//! `admit --socket`. Each prints the daemon's JSON (or a table); a request
//! the daemon refuses prints its message and exits 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::{json, Value};
use topomgr::daemon::client::{encode_segment, Client, Response};
use topomgr::manifest::STDIN_PATH;

use super::text::{field, Columns};
use super::{host, Output};

/// `--socket PATH` (default: the configured `[daemon] socket`).
#[derive(Debug, Args)]
pub struct SocketArg {
    /// The daemon's socket (default: config [daemon] socket, /run/topomgr/topomgr.sock).
    #[arg(long)]
    pub socket: Option<PathBuf>,
}

impl SocketArg {
    /// A client of the socket.
    pub fn client(&self, config: &Path) -> anyhow::Result<Client> {
        let path = match &self.socket {
            Some(p) => p.clone(),
            None => host::load_config(config)?.daemon.socket,
        };
        Ok(Client::new(&path))
    }
}

/// Arguments of `topomgr pods`.
#[derive(Debug, Args)]
pub struct PodsArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    output: Output,
}

/// Arguments of `topomgr attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// Pod uid.
    uid: String,
    /// Container name.
    container: String,
    /// The container's cgroup, relative to the cgroup root.
    cgroup_path: String,
}

/// Print an answer: its JSON on success, its message and exit 1 otherwise.
pub(super) fn finish(resp: &Response, print: impl FnOnce(&Value)) -> anyhow::Result<ExitCode> {
    if (200..300).contains(&resp.status) {
        print(&resp.json()?);
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "topomgr: error: daemon answered {}: {}",
            resp.status,
            resp.error_message()
        );
        Ok(ExitCode::from(1))
    }
}

fn pretty(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// A table of admission JSON objects (`topomgr pods --output table`).
pub fn print_pods_table(pods: &[Value], attachments: &Value) {
    let mut header = super::admit::POD_COLUMNS.to_vec();
    header.push("CGROUP");
    let mut table = Columns::new(&header);
    let s = |v: &Value| field(v.as_str().unwrap_or("")).into_owned();
    for p in pods {
        let pod = format!("{}/{}", s(&p["namespace"]), s(&p["name"]));
        if p["admitted"] != json!(true) {
            table.row(vec![
                pod,
                s(&p["qos"]),
                "no".to_owned(),
                format!("{}: {}", s(&p["reason"]), s(&p["message"])),
            ]);
            continue;
        }
        for c in p["containers"].as_array().into_iter().flatten() {
            let affinity = match c["affinity"].as_array() {
                Some(nodes) => nodes
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                None => "any".to_owned(),
            };
            let mut cpus = s(&c["cpus"]);
            if cpus.is_empty() {
                cpus = "-".to_owned();
            } else if c["exclusive"] == json!(true) {
                cpus.push('*');
            }
            let mems = Some(s(&c["mems"]))
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "-".to_owned());
            let devices: Vec<String> = c["devices"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| {
                    let ids: Vec<String> = v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|i| field(i.as_str().unwrap_or("")).into_owned())
                        .collect();
                    format!("{}={}", field(k), ids.join(","))
                })
                .collect();
            let cgroup = attachments[p["uid"].as_str().unwrap_or("")]
                [c["name"].as_str().unwrap_or("")]
            .as_str()
            .map_or_else(|| "-".to_owned(), |p| field(p).into_owned());
            table.row(vec![
                pod.clone(),
                s(&p["qos"]),
                "yes".to_owned(),
                s(&c["name"]),
                affinity,
                c["preferred"].to_string(),
                cpus,
                mems,
                if devices.is_empty() {
                    "-".to_owned()
                } else {
                    devices.join(" ")
                },
                cgroup,
            ]);
        }
    }
    print!("{}", table.render());
}

/// `topomgr pods`: the daemon's current pods and their allocations.
pub fn pods(config: &Path, args: PodsArgs) -> anyhow::Result<ExitCode> {
    let resp = args.socket.client(config)?.get("/v1/pods")?;
    finish(&resp, |v| match args.output {
        Output::Json => pretty(v),
        Output::Table => print_pods_table(
            v["pods"].as_array().map(Vec::as_slice).unwrap_or(&[]),
            &v["attachments"],
        ),
    })
}

/// `topomgr release [--socket PATH] UID`: release in the daemon.
pub fn release(config: &Path, socket: &SocketArg, uid: &str) -> anyhow::Result<ExitCode> {
    let resp = socket
        .client(config)?
        .delete(&format!("/v1/pods/{}", encode_segment(uid)))?;
    finish(&resp, pretty)
}

/// `topomgr attach UID CONTAINER CGROUP_PATH`.
pub fn attach(config: &Path, args: AttachArgs) -> anyhow::Result<ExitCode> {
    let resp = args
        .socket
        .client(config)?
        .attach(&args.uid, &args.container, &args.cgroup_path)?;
    finish(&resp, pretty)
}

/// `topomgr admit --socket`: check every input locally, then send each to
/// the daemon in order and print the combined answer like in-process admit.
pub fn admit(socket: &Path, inputs: &[String], output: Output) -> anyhow::Result<ExitCode> {
    let mut texts = Vec::with_capacity(inputs.len());
    if inputs.iter().filter(|p| *p == STDIN_PATH).count() > 1 {
        return Err(topomgr::manifest::ManifestError::StdinTwice.into());
    }
    for path in inputs {
        let (text, origin) = topomgr::manifest::read_input(path)?;
        topomgr::manifest::parse_pods(&text, &origin)?;
        texts.push(text);
    }
    let mut client = Client::new(socket);
    let mut all = Vec::new();
    for text in &texts {
        let resp = client.admit(text)?;
        if !(200..300).contains(&resp.status) {
            eprintln!(
                "topomgr: error: daemon answered {}: {}",
                resp.status,
                resp.error_message()
            );
            return Ok(ExitCode::from(1));
        }
        let v = resp.json()?;
        all.extend(v["pods"].as_array().cloned().unwrap_or_default());
    }
    match output {
        Output::Json => pretty(&json!({ "pods": all })),
        Output::Table => print_pods_table(&all, &Value::Null),
    }
    Ok(ExitCode::SUCCESS)
}
