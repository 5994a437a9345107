//! How many calls the helper serves at once. Every call the helper makes for a caller (its
//! credentials, polkit, whether it is still there) waits for a reply, and dbus-daemon allows a
//! connection only so many pending replies (`max_replies_per_connection`); an interactive polkit
//! check can pend for minutes. Unbounded, a flood of `Start`s from one user fills that quota and
//! every other caller's polkit check then fails with `LimitsExceeded`. So `Admission::admit`:
//! - learns the caller's uid without a bus call when its connection was seen before (a unique
//!   name is never reused on a bus), else through a credentials lookup among a few at a time,
//!   queued fairly (a burst of new connections delays others briefly, never refuses them);
//! - then charges the call to that uid's share and to the total, before any other bus call is
//!   made for it, so that one uid never holds more than its share and the rest stays for others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use zbus::message::Header;
use zbus::names::OwnedUniqueName;
use zbus::Connection;

use super::caller::Caller;
use super::lock;
use crate::config::Limits;
use crate::refusal::{refuse, Refusal};

/// Credential lookups in flight at once.
const LOOKUPS: usize = 8;
/// How long a call waits for a lookup slot before it is answered `Busy`.
const LOOKUP_WAIT: Duration = Duration::from_secs(10);
/// Connections remembered; past this the memory is cleared (a lookup is cheap, just bounded).
const REMEMBERED: usize = 4096;

/// The shared counters, and who the connections seen so far are.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    /// Calls in flight per uid; every admitted call has a uid, so the total is their sum.
    in_flight: Mutex<HashMap<u32, usize>>,
    lookups: Semaphore,
    known: Mutex<HashMap<OwnedUniqueName, Caller>>,
}

/// One admitted call; dropping it frees its slots.
#[derive(Debug)]
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    uid: u32,
}

impl Admission {
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            in_flight: Mutex::new(HashMap::new()),
            lookups: Semaphore::new(LOOKUPS),
            known: Mutex::new(HashMap::new()),
        })
    }

    /// Learns who is calling (remembered, or asked of the bus a few lookups at a time) and
    /// charges the call to that uid's share and to the total.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        conn: &Connection,
        header: &Header<'_>,
    ) -> Result<(Caller, Ticket), Refusal> {
        let Some(sender) = header.sender() else {
            return Err(refuse!(NotAuthorized, "the call carries no sender"));
        };
        let known = lock(&self.known).get(sender.as_str()).cloned();
        if let Some(caller) = known {
            return self.charge(caller.uid).map(|ticket| (caller, ticket));
        }
        let waited = tokio::time::timeout(LOOKUP_WAIT, self.lookups.acquire()).await;
        let too_many = "the helper is serving too many new callers; try again shortly";
        let slot = waited.map_err(|_| refuse!(Busy, "{too_many}"))?;
        let _slot = slot.map_err(|_| refuse!(Internal, "the helper is stopping"))?;
        let caller = Caller::identify(conn, sender).await?;
        let mut known = lock(&self.known);
        if known.len() >= REMEMBERED {
            known.clear();
        }
        known.insert(caller.unique_name.clone(), caller.clone());
        drop(known);
        self.charge(caller.uid).map(|ticket| (caller, ticket))
    }

    /// A slot of the total and one of `uid`'s share; `Busy` when either is taken.
    fn charge(self: &Arc<Self>, uid: u32) -> Result<Ticket, Refusal> {
        let mut in_flight = lock(&self.in_flight);
        if in_flight.values().sum::<usize>() >= self.limits.total.max(1) {
            let why = "the helper is serving too many calls; try again shortly";
            return Err(refuse!(Busy, "{why}"));
        }
        let count = in_flight.entry(uid).or_insert(0);
        if *count >= self.limits.per_uid.max(1) {
            let why = "too many calls of this user are in flight; wait for them to finish";
            return Err(refuse!(Busy, "{why}"));
        }
        *count += 1;
        Ok(Ticket {
            admission: Arc::clone(self),
            uid,
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.admission.in_flight);
        if let Some(count) = in_flight.get_mut(&self.uid) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                in_flight.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls in flight now, in total and for `uid`.
    fn in_flight(admission: &Admission, uid: u32) -> (usize, usize) {
        let in_flight = lock(&admission.in_flight);
        let total = in_flight.values().sum();
        (total, in_flight.get(&uid).copied().unwrap_or(0))
    }

    /// The message of the `Busy` refusal `charge` gave.
    fn busy(refused: Result<Ticket, Refusal>) -> String {
        let refusal = refused.unwrap_err();
        assert_eq!(refusal.kind, crate::refusal::RefusalKind::Busy);
        refusal.message().to_owned()
    }

    #[test]
    fn one_uid_gets_its_share_and_the_rest_stays_for_others() {
        let admission = Admission::new(Limits {
            total: 5,
            per_uid: 2,
        });
        let flood: Vec<_> = (0..2).map(|_| admission.charge(1000).unwrap()).collect();
        assert!(busy(admission.charge(1000)).contains("too many calls of this user"));
        let other = admission.charge(1001).unwrap();
        assert_eq!(in_flight(&admission, 1000), (3, 2));
        drop(flood);
        assert_eq!(in_flight(&admission, 1000), (1, 0));
        drop(other);
        assert_eq!(in_flight(&admission, 1001), (0, 0));
    }

    #[test]
    fn the_total_is_a_hard_bound_whoever_calls() {
        let admission = Admission::new(Limits {
            total: 2,
            per_uid: 2,
        });
        let a = admission.charge(1000).unwrap();
        let _b = admission.charge(1001).unwrap();
        assert!(busy(admission.charge(1002)).contains("serving too many calls"));
        assert_eq!(in_flight(&admission, 1002), (2, 0));
        drop(a);
        assert!(admission.charge(1002).is_ok());
    }
}
