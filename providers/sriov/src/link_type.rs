//! Link type names for the `linkTypes` selector.
//!
//! The device plugin reads a device's link type from netlink
//! (`LinkAttrs.EncapType` of `github.com/vishvananda/netlink`); sysfs has the
//! same number as `/sys/class/net/<if>/type` (an `ARPHRD_*` value). This is
//! netlink's table (`nl/nl_linux.go`, `IfInfomsg.EncapType`), so a config's
//! `"linkTypes": ["ether"]` or `["infiniband"]` selects what it selects in the
//! plugin.

/// The named link types: `ARPHRD_*` number and netlink's name (the
/// `fcfb0`-`fcfb12` range and unnamed numbers aside).
const NAMES: &[(u16, &str)] = &[
    (0, "generic"),
    (1, "ether"),
    (2, "eether"),
    (3, "ax25"),
    (4, "pronet"),
    (5, "chaos"),
    (6, "ieee802"),
    (7, "arcnet"),
    (8, "atalk"),
    (15, "dlci"),
    (19, "atm"),
    (23, "metricom"),
    (24, "ieee1394"),
    (32, "infiniband"),
    (256, "slip"),
    (257, "cslip"),
    (258, "slip6"),
    (259, "cslip6"),
    (260, "rsrvd"),
    (264, "adapt"),
    (270, "rose"),
    (271, "x25"),
    (272, "hwx25"),
    (512, "ppp"),
    (513, "hdlc"),
    (516, "lapb"),
    (517, "ddcmp"),
    (518, "rawhdlc"),
    (768, "ipip"),
    (769, "tunnel6"),
    (770, "frad"),
    (771, "skip"),
    (772, "loopback"),
    (773, "ltalk"),
    (774, "fddi"),
    (775, "bif"),
    (776, "sit"),
    (777, "ip/ddp"),
    (778, "gre"),
    (779, "pimreg"),
    (780, "hippi"),
    (781, "ash"),
    (782, "econet"),
    (783, "irda"),
    (784, "fcpp"),
    (785, "fcal"),
    (786, "fcpl"),
    (800, "tr"),
    (801, "ieee802.11"),
    (802, "ieee802.11/prism"),
    (803, "ieee802.11/radiotap"),
    (804, "ieee802.15.4"),
    (65534, "none"),
    (65535, "void"),
];

/// The `fcfb<N>` range: 787-799.
const FCFB: std::ops::RangeInclusive<u16> = 787..=799;

/// The netlink name of link type `arphrd` (the number in
/// `/sys/class/net/<if>/type`): `1` is `"ether"`, `32` is `"infiniband"`,
/// numbers netlink does not name are `"unknown<N>"`.
pub fn link_type_name(arphrd: u16) -> String {
    if let Some((_, name)) = NAMES.iter().find(|(n, _)| *n == arphrd) {
        return (*name).to_owned();
    }
    if FCFB.contains(&arphrd) {
        return format!("fcfb{}", arphrd - FCFB.start());
    }
    format!("unknown{arphrd}")
}

/// The link type `name` stands for, if it is a name [`link_type_name`]
/// gives: only those can ever match a `linkTypes` selector.
pub fn link_type_number(name: &str) -> Option<u16> {
    if let Some((n, _)) = NAMES.iter().find(|(_, known)| *known == name) {
        return Some(*n);
    }
    let number = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|n| n.parse::<u16>().ok())
    };
    let found = number("fcfb")
        .map(|k| FCFB.start().saturating_add(k))
        .or_else(|| number("unknown"))?;
    (link_type_name(found) == name).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_netlink() {
        let table = [
            (1, "ether"),
            (32, "infiniband"),
            (772, "loopback"),
            (0, "generic"),
            (513, "hdlc"),
            (768, "ipip"),
            (787, "fcfb0"),
            (799, "fcfb12"),
            (65534, "none"),
            (65535, "void"),
            (27, "unknown27"),
            (280, "unknown280"),
        ];
        for (n, want) in table {
            assert_eq!(link_type_name(n), want, "{n}");
            assert_eq!(link_type_number(want), Some(n), "{want}");
        }
        for not in [
            "Ether",
            "eth",
            "unknown1",
            "unknown027",
            "fcfb13",
            "fcfb",
            "unknown65536",
            "",
        ] {
            assert_eq!(link_type_number(not), None, "{not}");
        }
    }
}
