//! The API server's checks of a container's (or the pod's) resource
//! requirements, as `ValidateResourceRequirements` in Kubernetes'
//! `pkg/apis/core/validation` makes them (the integer rule of
//! kubernetes/kubernetes PR 48922, hugepages of PR 84051):
//!
//! - a resource name is a standard container resource (`cpu`, `memory`,
//!   `ephemeral-storage`, `hugepages-<page size>`) or has a domain
//!   (`example.com/widget`: an extended resource, or a `kubernetes.io/`
//!   native one);
//! - an extended resource is counted in whole units (`"0.5"` is refused:
//!   before, it was rounded up to a whole widget);
//! - a hugepages quantity is a positive whole multiple of its page size;
//! - extended resources and hugepages cannot be overcommitted: a request
//!   needs a limit, and they are equal;
//! - hugepages need a cpu or memory request or limit beside them.

use std::collections::BTreeMap;

use topomgr_sdk::quantity::Quantity;

use super::Problem;

/// Resource names without a domain that containers may request.
const STANDARD: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

const NANOS: u128 = 1_000_000_000;

/// Whether `name` is native to Kubernetes (no domain, or a `kubernetes.io/` one).
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// An extended resource: not native, not a quota's `requests.` name.
pub(crate) fn is_extended(name: &str) -> bool {
    !is_native(name) && !name.starts_with("requests.")
}

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// Check one resource name (of a container's, not the pod-level,
/// requirements when `container`) and its quantity.
pub(crate) fn check_quantity(
    name: &str,
    text: &str,
    quantity: Quantity,
    container: bool,
) -> Result<(), Problem> {
    if !container {
        // Pod-level resources name what the pod's cgroup limits.
    } else if !name.contains('/') {
        if !STANDARD.contains(&name) && !is_hugepages(name) {
            return Err(Problem::UnknownResource {
                name: name.to_owned(),
            });
        }
    } else if !is_native(name) && !is_extended(name) {
        return Err(Problem::UnknownResource {
            name: name.to_owned(),
        });
    }
    if is_extended(name) && !quantity.nanos().is_multiple_of(NANOS) {
        return Err(Problem::NotInteger {
            text: text.to_owned(),
        });
    }
    if let Some(size) = name.strip_prefix("hugepages-") {
        let page = Quantity::parse(size)
            .ok()
            .map(Quantity::nanos)
            .filter(|p| *p > 0 && p.is_multiple_of(NANOS));
        if page.is_none_or(|p| !quantity.nanos().is_multiple_of(p)) {
            return Err(Problem::HugePagesMultiple {
                text: text.to_owned(),
                name: name.to_owned(),
            });
        }
    }
    Ok(())
}

/// Check requests against limits (both as written, names already checked):
/// `Ok` or the resource and the problem (reported at the request).
pub(crate) fn check_requirements(
    requests: &BTreeMap<String, (String, Quantity)>,
    limits: &BTreeMap<String, (String, Quantity)>,
) -> Result<(), (String, Problem)> {
    for (name, (request_text, request)) in requests {
        let overcommit = !is_extended(name) && !is_hugepages(name);
        match limits.get(name) {
            Some((limit_text, limit)) if !overcommit && request != limit => {
                return Err((
                    name.clone(),
                    Problem::RequestNotLimit {
                        request: request_text.clone(),
                        limit: limit_text.clone(),
                    },
                ))
            }
            None if !overcommit => return Err((name.clone(), Problem::LimitRequired)),
            _ => {}
        }
    }
    Ok(())
}

/// Whether hugepages are requested or limited without cpu or memory.
pub(crate) fn hugepages_alone(
    requests: &BTreeMap<String, (String, Quantity)>,
    limits: &BTreeMap<String, (String, Quantity)>,
) -> bool {
    let all = || requests.keys().chain(limits.keys());
    all().any(|n| is_hugepages(n)) && !all().any(|n| n == "cpu" || n == "memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    #[test]
    fn names_and_quantities_as_the_api_server_checks_them() {
        for (name, text) in [
            ("cpu", "0.5"),
            ("memory", "1.5"),
            ("ephemeral-storage", "1Gi"),
            ("example.com/widget", "2"),
            ("example.com/widget", "2000m"),
            ("hugepages-2Mi", "4Mi"),
            ("hugepages-1Gi", "0"),
            ("kubernetes.io/batch", "0.5"),
        ] {
            assert_eq!(
                check_quantity(name, text, q(text), true),
                Ok(()),
                "{name}: {text}"
            );
        }
        let refused = |name: &str, text: &str| {
            check_quantity(name, text, q(text), true)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused("example.com/widget", "0.5"),
            "invalid value \"0.5\": must be an integer (an extended resource is counted in whole units)"
        );
        assert_eq!(
            refused("hugepages-2Mi", "3Mi"),
            "invalid value \"3Mi\": 3Mi is not positive integer multiple of hugepages-2Mi"
        );
        assert_eq!(
            refused("hugepages-x", "2Mi"),
            "invalid value \"2Mi\": 2Mi is not positive integer multiple of hugepages-x"
        );
        assert_eq!(check_quantity("pids", "1", q("1"), false), Ok(()));
        assert_eq!(
            refused("widgets", "1"),
            "\"widgets\" is not a resource a container can request: use a standard resource (cpu, memory, ephemeral-storage, hugepages-<page size>) or an extended resource with a domain (example.com/widgets)"
        );
    }

    #[test]
    fn extended_resources_and_hugepages_are_not_overcommitted() {
        let list = |e: &[(&str, &str)]| -> BTreeMap<String, (String, Quantity)> {
            e.iter()
                .map(|(n, t)| (n.to_string(), (t.to_string(), q(t))))
                .collect()
        };
        assert_eq!(
            check_requirements(&list(&[("cpu", "1")]), &list(&[("cpu", "2")])),
            Ok(())
        );
        assert_eq!(
            check_requirements(
                &list(&[("example.com/w", "1")]),
                &list(&[("example.com/w", "2")])
            ),
            Err((
                "example.com/w".to_owned(),
                Problem::RequestNotLimit {
                    request: "1".to_owned(),
                    limit: "2".to_owned()
                }
            ))
        );
        assert_eq!(
            check_requirements(&list(&[("hugepages-2Mi", "2Mi")]), &list(&[])),
            Err(("hugepages-2Mi".to_owned(), Problem::LimitRequired))
        );
        assert!(hugepages_alone(
            &list(&[]),
            &list(&[("hugepages-2Mi", "2Mi")])
        ));
        assert!(!hugepages_alone(
            &list(&[("memory", "1Gi")]),
            &list(&[("hugepages-2Mi", "2Mi")])
        ));
    }
}
