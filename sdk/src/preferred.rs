//! [`PreferredAllocationRequest`]: the device plugins' `GetPreferredAllocation`.

use serde::{Deserialize, Serialize};

/// The `reason` of an error about a request that cannot be answered as
/// asked: a malformed [`PreferredAllocationRequest`], or one naming a
/// resource or device the provider does not have.
pub const INVALID_REQUEST_REASON: &str = "InvalidRequest";

/// The kubelet device plugin call `GetPreferredAllocation`: which `size`
/// devices of `resource` the provider would pick from `available` (in that
/// order), always including `must_include`.
///
/// The host sends it for `topomgr provider NAME preferred`; the SDK's device
/// toolkit sends it to a [`DevicePlugin`](crate::devices::DevicePlugin)'s
/// choice hook while allocating, exactly where the kubelet calls the plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PreferredAllocationRequest {
    /// The resource name (`nvidia.com/gpu`).
    pub resource: String,
    /// Device ids to choose from, in the caller's order.
    pub available: Vec<String>,
    /// Device ids the answer must contain (a subset of `available`).
    #[serde(default)]
    pub must_include: Vec<String>,
    /// How many devices to pick.
    pub size: usize,
}

impl PreferredAllocationRequest {
    /// A request for `size` devices of `resource` out of `available`,
    /// including `must_include`.
    pub fn new(
        resource: impl Into<String>,
        available: Vec<String>,
        must_include: Vec<String>,
        size: usize,
    ) -> Self {
        PreferredAllocationRequest {
            resource: resource.into(),
            available,
            must_include,
            size,
        }
    }

    /// Checks the request's shape: no id twice in `available` or
    /// `must_include`, every `must_include` id available, no more of them
    /// than `size`, and `size` between 1 and the number available. The error
    /// says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for id in &self.available {
            if id.is_empty() {
                return Err("an available device id is empty".to_owned());
            }
            if !seen.insert(id.as_str()) {
                return Err(format!("device {id:?} is listed twice in available"));
            }
        }
        let mut must = std::collections::BTreeSet::new();
        for id in &self.must_include {
            if !must.insert(id.as_str()) {
                return Err(format!("device {id:?} is listed twice in must_include"));
            }
            if !seen.contains(id.as_str()) {
                return Err(format!(
                    "must_include names device {id:?}, which is not in available"
                ));
            }
        }
        if self.size == 0 {
            return Err("size is 0; ask for at least one device".to_owned());
        }
        if self.size > self.available.len() {
            return Err(format!(
                "size {} is larger than the {} available device(s)",
                self.size,
                self.available.len()
            ));
        }
        if self.must_include.len() > self.size {
            return Err(format!(
                "must_include names {} devices, more than size {}",
                self.must_include.len(),
                self.size
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(available: &[&str], must: &[&str], size: usize) -> PreferredAllocationRequest {
        PreferredAllocationRequest::new(
            "x/y",
            available.iter().map(|s| s.to_string()).collect(),
            must.iter().map(|s| s.to_string()).collect(),
            size,
        )
    }

    #[test]
    fn validation_names_the_problem() {
        assert_eq!(req(&["a", "b"], &["b"], 2).validate(), Ok(()));
        assert_eq!(
            req(&["a", "a"], &[], 1).validate().unwrap_err(),
            "device \"a\" is listed twice in available"
        );
        assert_eq!(
            req(&["a"], &["c"], 1).validate().unwrap_err(),
            "must_include names device \"c\", which is not in available"
        );
        assert_eq!(
            req(&["a"], &[], 0).validate().unwrap_err(),
            "size is 0; ask for at least one device"
        );
        assert_eq!(
            req(&["a"], &[], 2).validate().unwrap_err(),
            "size 2 is larger than the 1 available device(s)"
        );
        assert_eq!(
            req(&["a", "b", "c"], &["a", "b"], 1)
                .validate()
                .unwrap_err(),
            "must_include names 2 devices, more than size 1"
        );
    }
}
