//! Where the API server is and how topomgr authenticates to it: a
//! kubeconfig file (its current context: the cluster's `server`, its CA,
//! the user's client certificate and key or bearer token, inline `-data` or
//! files relative to the kubeconfig's directory, as kubectl reads them) or
//! the pod's service account when topomgr runs in a pod
//! (`KUBERNETES_SERVICE_HOST`/`_PORT`, the token and CA under
//! `/var/run/secrets/kubernetes.io/serviceaccount`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// The in-cluster service account directory.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Where the access comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A kubeconfig file.
    Kubeconfig(PathBuf),
    /// The pod's service account (`SERVICE_ACCOUNT_DIR`) and the
    /// `KUBERNETES_SERVICE_*` variables.
    InCluster,
}

/// Why the access could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// A file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// The kubeconfig is not valid YAML of the expected shape.
    #[error("kubeconfig {path} cannot be parsed: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The kubeconfig or the service account does not give a usable access.
    #[error("{origin}: {message}")]
    Invalid {
        /// The file, or `in-cluster`.
        origin: String,
        /// What is wrong.
        message: String,
    },
}

/// How requests authenticate with a bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    /// Given in the kubeconfig.
    Literal(String),
    /// Read from the file at each new connection (service account tokens
    /// are rotated).
    File(PathBuf),
}

/// A usable access to one API server.
#[derive(Debug)]
pub struct Access {
    /// `https` or `http`.
    pub(crate) tls: bool,
    /// The server's host name or address (no brackets).
    pub(crate) host: String,
    /// Its port.
    pub(crate) port: u16,
    /// A path prefix of the server URL (usually empty), without a
    /// trailing slash.
    pub(crate) base_path: String,
    /// The name checked against the server's certificate
    /// (`tls-server-name`, default `host`).
    pub(crate) server_name: String,
    /// CAs trusted for the server (DER).
    pub(crate) roots: Vec<CertificateDer<'static>>,
    /// A client certificate chain and its key.
    pub(crate) identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    /// A bearer token.
    pub(crate) token: Option<Token>,
    /// Where it came from, for messages.
    pub(crate) origin: String,
}

impl Access {
    /// Load the access of `source`.
    pub fn load(source: &Source) -> Result<Access, AccessError> {
        match source {
            Source::Kubeconfig(path) => {
                let text = read(path)?;
                let text = String::from_utf8(text).map_err(|_| AccessError::Parse {
                    path: path.clone(),
                    message: "it is not UTF-8".to_owned(),
                })?;
                let dir = path.parent().unwrap_or(Path::new("."));
                Access::from_kubeconfig(&text, path, dir)
            }
            Source::InCluster => Access::in_cluster(
                std::env::var("KUBERNETES_SERVICE_HOST").ok(),
                std::env::var("KUBERNETES_SERVICE_PORT").ok(),
                Path::new(SERVICE_ACCOUNT_DIR),
            ),
        }
    }

    /// The server, as `https://host:port` (for messages).
    pub fn server(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!(
            "{}://{host}:{}{}",
            if self.tls { "https" } else { "http" },
            self.port,
            self.base_path
        )
    }

    /// Where the access came from (a kubeconfig path or `in-cluster`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The access of a pod's service account: `host` and `port` from the
    /// `KUBERNETES_SERVICE_*` variables, token and CA in `dir`.
    pub(crate) fn in_cluster(
        host: Option<String>,
        port: Option<String>,
        dir: &Path,
    ) -> Result<Access, AccessError> {
        let invalid = |message: String| AccessError::Invalid {
            origin: "in-cluster".to_owned(),
            message,
        };
        let (Some(host), Some(port)) = (host.filter(|h| !h.is_empty()), port) else {
            return Err(invalid(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set: topomgr is not running in a pod (set `[kubernetes] kubeconfig`)".to_owned(),
            ));
        };
        let port: u16 = port
            .parse()
            .map_err(|_| invalid(format!("KUBERNETES_SERVICE_PORT {port:?} is not a port")))?;
        let ca_path = dir.join("ca.crt");
        let roots = certificates(&read(&ca_path)?, &ca_path.display().to_string())?;
        let token = dir.join("token");
        read(&token)?;
        let host = host.trim_matches(['[', ']']).to_owned();
        Ok(Access {
            tls: true,
            server_name: host.clone(),
            host,
            port,
            base_path: String::new(),
            roots,
            identity: None,
            token: Some(Token::File(token)),
            origin: "in-cluster".to_owned(),
        })
    }

    /// The access of kubeconfig `text` (read from `path`; relative file
    /// names resolve against `dir`), its current context.
    pub(crate) fn from_kubeconfig(
        text: &str,
        path: &Path,
        dir: &Path,
    ) -> Result<Access, AccessError> {
        let origin = format!("kubeconfig {}", path.display());
        let invalid = |message: String| AccessError::Invalid {
            origin: origin.clone(),
            message,
        };
        let config: Kubeconfig = serde_saphyr::from_str(text).map_err(|e| AccessError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let current = config
            .current_context
            .as_deref()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| invalid("it names no current-context".to_owned()))?;
        let context = named(&config.contexts, current).ok_or_else(|| {
            invalid(format!(
                "its current-context {current:?} is not among its contexts"
            ))
        })?;
        let cluster = named(&config.clusters, &context.cluster).ok_or_else(|| {
            invalid(format!(
                "context {current:?} names cluster {:?}, which it does not define",
                context.cluster
            ))
        })?;
        let user = match &context.user {
            Some(u) if !u.is_empty() => Some(named(&config.users, u).ok_or_else(|| {
                invalid(format!(
                    "context {current:?} names user {u:?}, which it does not define"
                ))
            })?),
            _ => None,
        };
        if cluster.insecure_skip_tls_verify {
            return Err(invalid(format!(
                "cluster {:?} sets insecure-skip-tls-verify, which topomgr does not support: give its certificate-authority",
                context.cluster
            )));
        }
        let (tls, host, port, base_path) = parse_server(&cluster.server).map_err(invalid)?;
        let file = |p: &str| -> PathBuf { dir.join(p) };
        let roots = match (
            &cluster.certificate_authority_data,
            &cluster.certificate_authority,
        ) {
            (Some(data), _) => certificates(
                &decode(data, "certificate-authority-data").map_err(invalid)?,
                "certificate-authority-data",
            )?,
            (None, Some(p)) => {
                let p = file(p);
                certificates(&read(&p)?, &p.display().to_string())?
            }
            (None, None) => Vec::new(),
        };
        if tls && roots.is_empty() {
            return Err(invalid(format!(
                "cluster {:?} gives no certificate-authority(-data): topomgr trusts no system CAs for the API server",
                context.cluster
            )));
        }
        let mut identity = None;
        let mut token = None;
        if let Some(user) = user {
            if user.exec.is_some() || user.auth_provider.is_some() {
                return Err(invalid(format!(
                    "user {:?} authenticates with an exec or auth-provider plugin, which topomgr does not run: give a client certificate or a token",
                    context.user.as_deref().unwrap_or_default()
                )));
            }
            let cert = match (&user.client_certificate_data, &user.client_certificate) {
                (Some(d), _) => Some(certificates(
                    &decode(d, "client-certificate-data").map_err(invalid)?,
                    "client-certificate-data",
                )?),
                (None, Some(p)) => {
                    let p = file(p);
                    Some(certificates(&read(&p)?, &p.display().to_string())?)
                }
                (None, None) => None,
            };
            let key = match (&user.client_key_data, &user.client_key) {
                (Some(d), _) => Some(private_key(
                    &decode(d, "client-key-data").map_err(invalid)?,
                    "client-key-data",
                )?),
                (None, Some(p)) => {
                    let p = file(p);
                    Some(private_key(&read(&p)?, &p.display().to_string())?)
                }
                (None, None) => None,
            };
            identity = match (cert, key) {
                (Some(c), Some(k)) => Some((c, k)),
                (None, None) => None,
                _ => {
                    return Err(invalid(
                        "its user gives a client certificate without a key, or a key without a certificate".to_owned(),
                    ))
                }
            };
            token = match (&user.token, &user.token_file) {
                (Some(t), _) if !t.is_empty() => Some(Token::Literal(t.clone())),
                (_, Some(p)) if !p.is_empty() => {
                    let p = file(p);
                    read(&p)?;
                    Some(Token::File(p))
                }
                _ => None,
            };
        }
        Ok(Access {
            tls,
            server_name: cluster
                .tls_server_name
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| host.clone()),
            host,
            port,
            base_path,
            roots,
            identity,
            token,
            origin,
        })
    }
}

fn read(path: &Path) -> Result<Vec<u8>, AccessError> {
    std::fs::read(path).map_err(|error| AccessError::Read {
        path: path.to_path_buf(),
        error,
    })
}

fn decode(data: &str, what: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("{what} is not base64: {e}"))
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, AccessError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AccessError::Invalid {
            origin: what.to_owned(),
            message: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(AccessError::Invalid {
            origin: what.to_owned(),
            message: "holds no PEM certificate".to_owned(),
        });
    }
    Ok(certs)
}

fn private_key(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, AccessError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| AccessError::Invalid {
        origin: what.to_owned(),
        message: format!("holds no PEM private key: {e}"),
    })
}

/// `(tls, host, port, base path)` of a server URL.
fn parse_server(server: &str) -> Result<(bool, String, u16, String), String> {
    let (tls, rest) = if let Some(r) = server.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = server.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!(
            "server {server:?} is not an https:// or http:// URL"
        ));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("server {server:?} has an unclosed IPv6 address"))?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err(format!("server {server:?} has junk after its address")),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(format!("server {server:?} names no host"));
    }
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| format!("server {server:?} has an invalid port {p:?}"))?,
        None => default_port,
    };
    Ok((tls, host.to_owned(), port, path.to_owned()))
}

fn named<'a, T>(list: &'a [Named<T>], name: &str) -> Option<&'a T> {
    list.iter().find(|n| n.name == name).map(|n| &n.value)
}

/// The parts of a kubeconfig topomgr reads (others are ignored, as
/// kubectl ignores what it does not know).
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Kubeconfig {
    #[serde(default)]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
}

struct Named<T> {
    name: String,
    value: T,
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Named<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut map = BTreeMap::<String, serde_json::Value>::deserialize(d)?;
        let name = match map.remove("name") {
            Some(serde_json::Value::String(s)) => s,
            _ => return Err(serde::de::Error::custom("an entry has no name")),
        };
        let body = map
            .into_iter()
            .find(|(k, _)| k == "cluster" || k == "user" || k == "context")
            .map(|(_, v)| v)
            .unwrap_or(serde_json::Value::Object(Default::default()));
        let value = serde_json::from_value(body)
            .map_err(|e| serde::de::Error::custom(format!("entry {name:?}: {e}")))?;
        Ok(Named { name, value })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    #[serde(default)]
    certificate_authority: Option<String>,
    #[serde(default)]
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    #[serde(default)]
    tls_server_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    #[serde(default)]
    client_certificate: Option<String>,
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_key: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default, rename = "tokenFile")]
    token_file: Option<String>,
    #[serde(default)]
    exec: Option<serde_json::Value>,
    #[serde(default)]
    auth_provider: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Access, AccessError> {
        Access::from_kubeconfig(text, Path::new("/k/config"), Path::new("/k"))
    }

    const PLAIN: &str = "apiVersion: v1
kind: Config
current-context: test
clusters:
- name: c
  cluster:
    server: http://127.0.0.1:6443/prefix/
users:
- name: u
  user:
    token: abc
contexts:
- name: test
  context:
    cluster: c
    user: u
";

    #[test]
    fn a_plain_kubeconfig_reads() {
        let a = load(PLAIN).unwrap();
        assert!(!a.tls);
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 6443));
        assert_eq!(a.base_path, "/prefix");
        assert_eq!(a.token, Some(Token::Literal("abc".to_owned())));
        assert_eq!(a.server(), "http://127.0.0.1:6443/prefix");
    }

    #[test]
    fn bad_kubeconfigs_name_what_is_wrong() {
        let cases = [
            (
                PLAIN.replace("current-context: test", "current-context: other"),
                "current-context \"other\" is not among its contexts",
            ),
            (
                PLAIN.replace("cluster: c\n", "cluster: d\n"),
                "names cluster \"d\"",
            ),
            (PLAIN.replace("user: u\n", "user: v\n"), "names user \"v\""),
            (
                PLAIN.replace("http://127.0.0.1:6443/prefix/", "ftp://x"),
                "is not an https:// or http:// URL",
            ),
            (
                PLAIN.replace("127.0.0.1:6443", "127.0.0.1:99999"),
                "invalid port",
            ),
            (
                PLAIN.replace("http://", "https://"),
                "gives no certificate-authority",
            ),
            (
                PLAIN.replace("    token: abc", "    exec: {command: x}"),
                "exec or auth-provider",
            ),
            (
                PLAIN.replace("    token: abc", "    client-key-data: \"@@@\""),
                "client-key-data is not base64",
            ),
            ("- a list".to_owned(), "cannot be parsed"),
        ];
        for (text, want) in cases {
            let e = load(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }

    #[test]
    fn servers_parse() {
        assert_eq!(
            parse_server("https://[::1]:8443").unwrap(),
            (true, "::1".to_owned(), 8443, String::new())
        );
        assert_eq!(
            parse_server("https://api.example").unwrap(),
            (true, "api.example".to_owned(), 443, String::new())
        );
        assert!(parse_server("https://:1").is_err());
    }

    #[test]
    fn in_cluster_needs_the_variables_and_files() {
        let e = Access::in_cluster(None, None, Path::new("/nonexistent")).unwrap_err();
        assert!(e.to_string().contains("not running in a pod"), "{e}");
        let e = Access::in_cluster(
            Some("10.0.0.1".into()),
            Some("x".into()),
            Path::new("/nonexistent"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("is not a port"), "{e}");
        let e = Access::in_cluster(
            Some("10.0.0.1".into()),
            Some("443".into()),
            Path::new("/nonexistent"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.crt"), "{e}");
    }
}
