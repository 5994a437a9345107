//! `/proc/net/route` → IPv4 routes.

use super::facts::Route;

/// Every route but the default one, as `a.b.c.d/n` with its interface. The header and malformed
/// lines are skipped. Destination and mask are 8 hex digits in host (little-endian) order.
pub fn parse_proc_net_route(text: &str) -> Vec<Route> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let destination = parse_hex_le(fields[1])?;
            let mask = parse_hex_le(fields[7])?;
            let prefix = mask.leading_ones();
            // A mask must be contiguous ones.
            if mask.checked_shl(prefix).unwrap_or(0) != 0 || prefix == 0 {
                return None;
            }
            let network = destination & mask;
            Some(Route {
                destination: format!("{}/{}", std::net::Ipv4Addr::from(network), prefix),
                device: fields[0].to_owned(),
            })
        })
        .collect()
}

/// 8 hex digits, first octet in the low byte → the address as a big-endian `u32`.
fn parse_hex_le(field: &str) -> Option<u32> {
    if field.len() != 8 {
        return None;
    }
    u32::from_str_radix(field, 16).ok().map(u32::swap_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n";

    #[test]
    fn reads_routes_skipping_the_default() {
        let text = format!(
            "{HEADER}eth0\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
             tun2\t00000000\t00000000\t0001\t0\t0\t0\t00000080\t0\t0\t0\n\
             tun2\t00000080\t00000000\t0001\t0\t0\t0\t00000080\t0\t0\t0\n\
             tun0\t0000080A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
             eth0\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n\
             wg0\t0101A8C0\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0\n\
             bad line\n"
        );
        let routes: Vec<(String, String)> = parse_proc_net_route(&text)
            .into_iter()
            .map(|r| (r.destination, r.device))
            .collect();
        assert_eq!(
            routes,
            vec![
                ("0.0.0.0/1".to_owned(), "tun2".to_owned()),
                ("128.0.0.0/1".to_owned(), "tun2".to_owned()),
                ("10.8.0.0/24".to_owned(), "tun0".to_owned()),
                ("192.168.1.0/24".to_owned(), "eth0".to_owned()),
                ("192.168.1.1/32".to_owned(), "wg0".to_owned()),
            ]
        );
    }

    #[test]
    fn header_only_is_empty() {
        assert!(parse_proc_net_route(HEADER).is_empty());
        assert!(parse_proc_net_route("").is_empty());
    }
}
