//! The devices of one pool of a DRA driver as its ResourceSlices
//! (`resource.k8s.io/v1`) publish them: read to match a claim's device that
//! the kubelet names by driver, pool and device only (no CDI device) to
//! its PCI device by the driver's standard attributes. One list call,
//! filtered by the driver server-side (`spec.driver` field selector) and by
//! pool here; a pool's slices of an older generation than its newest are
//! being replaced and are not read.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::http::{ApiClient, ApiError, Method};

/// Why a pool's devices could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SliceError {
    /// No answer.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// An answer other than 2xx.
    #[error("listing the ResourceSlices of driver {driver}: HTTP {status}: {message}")]
    Status {
        /// The driver.
        driver: String,
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// A body that is not a ResourceSliceList.
    #[error("the ResourceSlices of driver {driver} do not parse: {message}")]
    Parse {
        /// The driver.
        driver: String,
        /// What did not parse.
        message: String,
    },
}

/// Device name -> its string-valued attributes (qualified names as
/// published; an unqualified name is in the driver's own domain).
pub type PoolDevices = BTreeMap<String, BTreeMap<String, String>>;

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    items: Vec<Slice>,
}

#[derive(Deserialize)]
struct Slice {
    spec: Spec,
}

#[derive(Deserialize)]
struct Spec {
    driver: String,
    pool: Pool,
    #[serde(default)]
    devices: Vec<Device>,
}

#[derive(Deserialize)]
struct Pool {
    name: String,
    #[serde(default)]
    generation: i64,
}

#[derive(Deserialize)]
struct Device {
    name: String,
    #[serde(default)]
    attributes: BTreeMap<String, Attribute>,
}

#[derive(Deserialize)]
struct Attribute {
    string: Option<String>,
}

/// The devices of pool `pool` of driver `driver` in a ResourceSliceList
/// `body` (the newest generation of the pool only).
pub fn parse_pool(body: &[u8], driver: &str, pool: &str) -> Result<PoolDevices, SliceError> {
    let list: List = serde_json::from_slice(body).map_err(|e| SliceError::Parse {
        driver: driver.to_owned(),
        message: e.to_string(),
    })?;
    let slices: Vec<Spec> = list
        .items
        .into_iter()
        .map(|s| s.spec)
        .filter(|s| s.driver == driver && s.pool.name == pool)
        .collect();
    let newest = slices.iter().map(|s| s.pool.generation).max();
    let mut out = PoolDevices::new();
    for spec in slices
        .into_iter()
        .filter(|s| Some(s.pool.generation) == newest)
    {
        for d in spec.devices {
            let attributes = d
                .attributes
                .into_iter()
                .filter_map(|(k, v)| Some((k, v.string?)))
                .collect();
            out.insert(d.name, attributes);
        }
    }
    Ok(out)
}

/// The devices of pool `pool` of driver `driver`, read from the API
/// server (the client's deadline bounds the call).
pub async fn pool_devices(
    client: &mut ApiClient,
    driver: &str,
    pool: &str,
) -> Result<PoolDevices, SliceError> {
    // A driver name is a DNS subdomain: nothing in it needs escaping in a
    // query but the selector's own `=`.
    let path =
        format!("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3D{driver}");
    let r = client.send(Method::GET, &path, None, Vec::new()).await?;
    if !r.is_success() {
        return Err(SliceError::Status {
            driver: driver.to_owned(),
            status: r.status,
            message: r.message(),
        });
    }
    parse_pool(&r.body, driver, pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"{"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","items":[
      {"metadata":{"name":"a"},"spec":{"driver":"nic.example.org","nodeName":"n","pool":{"name":"node-a","generation":2,"resourceSliceCount":2},
        "devices":[{"name":"nic-0","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:17:00.0"},"numa":{"int":0}}}]}},
      {"metadata":{"name":"b"},"spec":{"driver":"nic.example.org","nodeName":"n","pool":{"name":"node-a","generation":2,"resourceSliceCount":2},
        "devices":[{"name":"nic-1","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:af:00.0"}}}]}},
      {"metadata":{"name":"stale"},"spec":{"driver":"nic.example.org","nodeName":"n","pool":{"name":"node-a","generation":1,"resourceSliceCount":1},
        "devices":[{"name":"nic-1","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:3b:00.0"}}},{"name":"gone"}]}},
      {"metadata":{"name":"other"},"spec":{"driver":"nic.example.org","nodeName":"m","pool":{"name":"node-b","generation":7,"resourceSliceCount":1},
        "devices":[{"name":"nic-9"}]}}
    ]}"#;

    #[test]
    fn a_pools_newest_slices_give_its_devices_string_attributes() {
        let got = parse_pool(LIST.as_bytes(), "nic.example.org", "node-a").unwrap();
        let want: PoolDevices = [("nic-0", "0000:17:00.0"), ("nic-1", "0000:af:00.0")]
            .into_iter()
            .map(|(d, a)| {
                (
                    d.to_owned(),
                    [("resource.kubernetes.io/pciBusID".to_owned(), a.to_owned())].into(),
                )
            })
            .collect();
        assert_eq!(got, want);
        assert!(parse_pool(LIST.as_bytes(), "nic.example.org", "node-c")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_body_that_is_no_slice_list_is_an_error_naming_the_driver() {
        let err = parse_pool(b"{\"items\":[{\"spec\":{}}]}", "nic.example.org", "node-a")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "the ResourceSlices of driver nic.example.org do not parse: missing field `driver`"
            ),
            "{err}"
        );
    }
}
