//! The CLI side of the daemon: `topomgr pods`, `release`, `attach`, and
//! `admit --socket`. Each prints the daemon's JSON (or a table); a request
//! the daemon refuses prints its message and exits 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use topomgr_daemon::client::{encode_segment, Client, Response};
use topomgr_manifest::STDIN_PATH;
use topomgr_node::api::{Admission, Admissions, Attached, Attachments, PodList};

use super::admit::{print_json, print_table};
use super::{inputs, Output};

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
            None => inputs::load_config(config)?.daemon.socket,
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

/// Read a successful answer as `T` and `print` it; print the daemon's
/// message and exit 1 otherwise.
pub(super) fn finish<T: serde::de::DeserializeOwned>(
    resp: &Response,
    print: impl FnOnce(&T) -> anyhow::Result<()>,
) -> anyhow::Result<ExitCode> {
    if !(200..300).contains(&resp.status) {
        refused(resp);
        return Ok(ExitCode::from(1));
    }
    print(&resp.parse()?)?;
    Ok(ExitCode::SUCCESS)
}

fn refused(resp: &Response) {
    eprintln!(
        "topomgr: error: daemon answered {}: {}",
        resp.status,
        resp.error_message()
    );
}

/// `topomgr pods`: the daemon's current pods and their allocations.
pub fn pods(config: &Path, args: PodsArgs) -> anyhow::Result<ExitCode> {
    let resp = args.socket.client(config)?.get("/v1/pods")?;
    finish(&resp, |list: &PodList| {
        match args.output {
            Output::Json => print_json(list)?,
            Output::Table => print_table(&list.pods, Some(&list.attachments)),
        }
        Ok(())
    })
}

/// `topomgr release [--socket PATH] UID`: release in the daemon.
pub fn release(config: &Path, socket: &SocketArg, uid: &str) -> anyhow::Result<ExitCode> {
    let resp = socket
        .client(config)?
        .delete(&format!("/v1/pods/{}", encode_segment(uid)))?;
    finish(&resp, print_json::<Admission>)
}

/// `topomgr attach UID CONTAINER CGROUP_PATH`.
pub fn attach(config: &Path, args: AttachArgs) -> anyhow::Result<ExitCode> {
    let resp = args
        .socket
        .client(config)?
        .attach(&args.uid, &args.container, &args.cgroup_path)?;
    finish(&resp, print_json::<Attached>)
}

/// `topomgr admit --socket`: check every input locally, then send each to
/// the daemon in order and print the combined answer like in-process admit.
pub fn admit(socket: &Path, inputs: &[String], output: Output) -> anyhow::Result<ExitCode> {
    let mut texts = Vec::with_capacity(inputs.len());
    if inputs.iter().filter(|p| *p == STDIN_PATH).count() > 1 {
        return Err(topomgr_manifest::ManifestError::StdinTwice.into());
    }
    for path in inputs {
        let (text, origin) = topomgr_manifest::read_input(path)?;
        topomgr_manifest::parse_pods(&text, &origin)?;
        texts.push(text);
    }
    let mut client = Client::new(socket);
    let mut all = Vec::new();
    for text in &texts {
        let resp = client.admit(text)?;
        if !(200..300).contains(&resp.status) {
            refused(&resp);
            return Ok(ExitCode::from(1));
        }
        all.extend(resp.parse::<Admissions>()?.pods);
    }
    match output {
        Output::Json => print_json(&Admissions { pods: all })?,
        Output::Table => print_table(&all, Some(&Attachments::new())),
    }
    Ok(ExitCode::SUCCESS)
}
