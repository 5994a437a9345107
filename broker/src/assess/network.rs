//! Routes that cover every Docker default address pool (often a full-tunnel VPN's): a warning,
//! never a blocker, outside the digest.

use enginekit_shared::wire::plan::{Warning, WarningCode};

use super::view::LinuxView;
use crate::i18n::trn;
use crate::probe::facts::Route;

/// An IPv4 network: address with host bits cleared, and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    pub(crate) addr: u32,
    pub(crate) prefix: u8,
}

impl Cidr {
    fn mask(prefix: u8) -> u32 {
        if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix))
        }
    }

    /// Parses `a.b.c.d` (a /32) or `a.b.c.d/n`, clearing host bits. IPv6, `default`, octets
    /// above 255 and prefixes above 32 are refused.
    pub(crate) fn parse(text: &str) -> Option<Cidr> {
        let (address, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, p.parse::<u8>().ok()?),
            None => (text, 32),
        };
        if prefix > 32 {
            return None;
        }
        let octets: Vec<&str> = address.split('.').collect();
        if octets.len() != 4 {
            return None;
        }
        let mut addr: u32 = 0;
        for octet in octets {
            if octet.is_empty() || octet.len() > 3 || !octet.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let value: u32 = octet.parse().ok()?;
            if value > 255 {
                return None;
            }
            addr = (addr << 8) | value;
        }
        Some(Cidr {
            addr: addr & Cidr::mask(prefix),
            prefix,
        })
    }

    /// The wider of the two contains the other's network address.
    pub(crate) fn overlaps(self, other: Cidr) -> bool {
        let mask = Cidr::mask(self.prefix.min(other.prefix));
        self.addr & mask == other.addr & mask
    }
}

/// Docker's 31 default pools, in table order: 172.17–172.31 as /16s, then 192.168.0.0/16 as
/// /20s.
pub(crate) fn default_pools() -> Vec<Cidr> {
    let mut pools = Vec::with_capacity(31);
    for second in 17..=31u32 {
        pools.push(Cidr {
            addr: (172 << 24) | (second << 16),
            prefix: 16,
        });
    }
    for third in (0..256u32).step_by(16) {
        pools.push(Cidr {
            addr: (192 << 24) | (168 << 16) | (third << 8),
            prefix: 20,
        });
    }
    pools
}

/// The greedy minimal set of routes that together cover every default pool, in routing-table
/// order; `None` when some pool stays free (Docker can still start).
pub(crate) fn routes_covering_pools(routes: &[Route]) -> Option<Vec<Route>> {
    let parsed: Vec<(usize, Cidr)> = routes
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Cidr::parse(&r.destination).map(|c| (i, c)))
        .collect();
    let pools = default_pools();
    let mut uncovered: Vec<bool> = vec![true; pools.len()];
    let mut chosen: Vec<usize> = Vec::new();
    while uncovered.iter().any(|u| *u) {
        let mut best: Option<(usize, Cidr, usize)> = None;
        for (index, cidr) in &parsed {
            if chosen.contains(index) {
                continue;
            }
            let covers = pools
                .iter()
                .zip(&uncovered)
                .filter(|(pool, open)| **open && cidr.overlaps(**pool))
                .count();
            let better = match best {
                None => covers > 0,
                Some((_, b, n)) => {
                    covers > n || (covers == n && covers > 0 && cidr.prefix < b.prefix)
                }
            };
            if better {
                best = Some((*index, *cidr, covers));
            }
        }
        let (index, cidr, _) = best?;
        chosen.push(index);
        for (pool, open) in pools.iter().zip(uncovered.iter_mut()) {
            if cidr.overlaps(*pool) {
                *open = false;
            }
        }
    }
    chosen.sort_unstable();
    Some(chosen.into_iter().map(|i| routes[i].clone()).collect())
}

/// The warning, when Docker is not running yet, daemon.json sets no pools, and the routes cover
/// every default pool.
pub(crate) fn address_pool_warning(view: &LinuxView) -> Option<Warning> {
    let docker_running = view.daemon_reachable || view.service_active == Some(true);
    if docker_running || view.address_pools_configured != Some(false) {
        return None;
    }
    let covering = routes_covering_pools(view.routes.as_deref()?)?;
    let listed = covering
        .iter()
        .map(|r| format!("{} via {}", r.destination, r.device))
        .collect::<Vec<_>>()
        .join(", ");
    let mut devices: Vec<&str> = Vec::new();
    for route in &covering {
        if !devices.contains(&route.device.as_str()) {
            devices.push(&route.device);
        }
    }
    let destinations = covering
        .iter()
        .map(|r| r.destination.as_str())
        .collect::<Vec<_>>()
        .join(",");
    Some(
        Warning::new(
            WarningCode::DockerAddressPoolsOverlapRoutes,
            // TRANSLATORS: {listed} is "<range> via <device>", comma-separated. The last
            // sentence is the reference's instruction, word for word.
            trn!(
                "Docker will not be able to start: the route {listed} (often a full-tunnel VPN) covers every address range Docker uses for its networks by default. Exclude Docker's ranges (172.17.0.0/16 to 172.31.0.0/16 and 192.168.0.0/16) from the VPN, or set \"default-address-pools\" (or \"bip\") in /etc/docker/daemon.json to a range no route uses, before continuing.",
                "Docker will not be able to start: the routes {listed} (often a full-tunnel VPN) cover every address range Docker uses for its networks by default. Exclude Docker's ranges (172.17.0.0/16 to 172.31.0.0/16 and 192.168.0.0/16) from the VPN, or set \"default-address-pools\" (or \"bip\") in /etc/docker/daemon.json to a range no route uses, before continuing.",
                covering.len(),
                listed = listed
            ),
        )
        .with_param("routes", destinations)
        .with_param("devices", devices.join(",")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(destination: &str, device: &str) -> Route {
        Route {
            destination: destination.to_owned(),
            device: device.to_owned(),
        }
    }

    fn named(routes: Option<Vec<Route>>) -> Option<Vec<String>> {
        routes.map(|r| r.into_iter().map(|r| r.destination).collect())
    }

    #[test]
    fn lists_dockers_31_default_pools() {
        let pools = default_pools();
        assert_eq!(pools.len(), 31);
        assert_eq!(pools[0], Cidr::parse("172.17.0.0/16").unwrap());
        assert_eq!(pools[14], Cidr::parse("172.31.0.0/16").unwrap());
        assert_eq!(pools[15], Cidr::parse("192.168.0.0/20").unwrap());
        assert_eq!(pools[30], Cidr::parse("192.168.240.0/20").unwrap());
        assert!(!pools.contains(&Cidr::parse("172.16.0.0/16").unwrap()));
    }

    #[test]
    fn parses_cidrs() {
        assert_eq!(
            Cidr::parse("10.8.0.0/24"),
            Some(Cidr {
                addr: 0x0a08_0000,
                prefix: 24
            })
        );
        assert_eq!(Cidr::parse("0.0.0.0/1"), Some(Cidr { addr: 0, prefix: 1 }));
        assert_eq!(
            Cidr::parse("10.8.0.1"),
            Some(Cidr {
                addr: 0x0a08_0001,
                prefix: 32
            })
        );
        assert_eq!(
            Cidr::parse("192.168.1.5/24"),
            Some(Cidr {
                addr: 0xc0a8_0100,
                prefix: 24
            })
        );
        for bad in [
            "256.0.0.0/8",
            "10.0.0.0/33",
            "default",
            "fe80::/64",
            "1.2.3/8",
            "",
        ] {
            assert_eq!(Cidr::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn finds_the_routes_covering_every_pool() {
        assert_eq!(
            named(routes_covering_pools(&[route("128.0.0.0/1", "tun2")])),
            Some(vec!["128.0.0.0/1".to_owned()])
        );
        // A laptop: the home LAN beside the tunnel is not named.
        assert_eq!(
            named(routes_covering_pools(&[
                route("192.168.1.0/24", "wlan0"),
                route("128.0.0.0/1", "tun2"),
            ])),
            Some(vec!["128.0.0.0/1".to_owned()])
        );
        let split_tunnel = [
            route("172.16.0.0/12", "wg0"),
            route("192.168.0.0/16", "wg0"),
        ];
        // A narrower route whose pool a wider one already covers is not named.
        let with_narrower = [
            route("172.17.0.0/16", "br0"),
            split_tunnel[0].clone(),
            split_tunnel[1].clone(),
        ];
        for routes in [&split_tunnel[..], &with_narrower[..]] {
            assert_eq!(
                named(routes_covering_pools(routes)),
                Some(vec![
                    "172.16.0.0/12".to_owned(),
                    "192.168.0.0/16".to_owned()
                ])
            );
        }
        assert_eq!(
            routes_covering_pools(&[route("192.168.0.0/20", "eth0")]),
            None
        );
        assert_eq!(
            routes_covering_pools(&[route("172.17.0.0/16", "docker0")]),
            None
        );
        assert_eq!(routes_covering_pools(&[]), None);
        assert_eq!(routes_covering_pools(&[route("nonsense", "x")]), None);
    }
}
