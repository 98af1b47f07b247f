//! The [`provider_config!`](crate::provider_config) macro.

/// Declares a provider's config type, deserialized from its
/// `[providers.NAME.config]` table by
/// [`ProviderConfig::parse`](crate::ProviderConfig::parse), with no
/// dependency but this SDK.
///
/// Write the struct (or enum) as usual, with `serde`'s field attributes
/// where needed; the macro derives `Deserialize` through the SDK's own
/// [`serde`](crate::serde) and refuses unknown keys
/// (`deny_unknown_fields`), so a typo in the operator's config is an error
/// naming the key, not a silently ignored setting.
///
/// ```
/// topomgr_sdk::provider_config! {
///     /// The FPGA provider's config.
///     #[derive(Debug)]
///     struct Config {
///         per_node: u32,
///         #[serde(default = "default_resource")]
///         resource: String,
///     }
/// }
/// fn default_resource() -> String {
///     "example.com/fpga".to_owned()
/// }
///
/// let table = topomgr_sdk::ProviderConfig(topomgr_sdk::serde_json::json!({"per_node": 2}));
/// let config: Config = table.parse().unwrap();
/// assert_eq!((config.per_node, config.resource.as_str()), (2, "example.com/fpga"));
/// let typo = topomgr_sdk::ProviderConfig(topomgr_sdk::serde_json::json!({"pernode": 2}));
/// assert_eq!(
///     typo.parse::<Config>().unwrap_err().to_string(),
///     "InvalidConfig: unknown field `pernode`, expected `per_node` or `resource`"
/// );
/// ```
///
/// The crate must name the SDK `topomgr_sdk` (its package name, not
/// renamed in `Cargo.toml`): the derive finds `serde` through that path.
#[macro_export]
macro_rules! provider_config {
    ($(#[$attr:meta])* $vis:vis struct $($rest:tt)*) => {
        #[derive($crate::serde::Deserialize)]
        #[serde(crate = "topomgr_sdk::serde", deny_unknown_fields)]
        $(#[$attr])*
        $vis struct $($rest)*
    };
    ($(#[$attr:meta])* $vis:vis enum $($rest:tt)*) => {
        #[derive($crate::serde::Deserialize)]
        #[serde(crate = "topomgr_sdk::serde", deny_unknown_fields)]
        $(#[$attr])*
        $vis enum $($rest)*
    };
}
