//! Compatibility with Go's `encoding/json`, which the SR-IOV network device
//! plugin uses to read its `config.json` and to write its `…_INFO`
//! environment variable: [`decode`] reads parsed JSON into the plugin's
//! field semantics, [`encode`] writes bytes the way Go does.

pub mod decode;
pub mod encode;
