//! Who is calling: the unique bus name from the message header, and uid/pid as the bus daemon
//! reports them (`GetConnectionCredentials`, which the kernel vouches for). Nothing here comes
//! from the message body. Any failure to learn the caller is a refusal.

use zbus::fdo::DBusProxy;
use zbus::names::{OwnedUniqueName, UniqueName};
use zbus::Connection;

use crate::refusal::{refuse, Refusal};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) unique_name: OwnedUniqueName,
    pub(crate) uid: u32,
    pub(crate) pid: Option<u32>,
}

impl Caller {
    /// Asks the bus daemon about `sender`, the unique name in a call's header.
    pub(crate) async fn identify(
        conn: &Connection,
        sender: &UniqueName<'_>,
    ) -> Result<Caller, Refusal> {
        let bus = DBusProxy::new(conn)
            .await
            .map_err(|e| refuse!(NotAuthorized, "cannot ask the bus who is calling: {e}"))?;
        let creds = bus
            .get_connection_credentials(sender.clone().into())
            .await
            .map_err(|e| refuse!(NotAuthorized, "the bus did not say who is calling: {e}"))?;
        let uid = creds
            .unix_user_id()
            .ok_or_else(|| refuse!(NotAuthorized, "the bus reported no uid for the caller"))?;
        Ok(Caller {
            unique_name: OwnedUniqueName::from(sender.to_owned()),
            uid,
            pid: creds.process_id(),
        })
    }

    /// The login name of the caller's uid, from the user database.
    pub(crate) fn user_name(&self) -> Result<String, Refusal> {
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(self.uid)) {
            Ok(Some(user)) => Ok(user.name),
            Ok(None) => Err(refuse!(
                IdentityMismatch,
                "uid {} has no entry in the user database",
                self.uid
            )),
            Err(e) => Err(refuse!(Internal, "cannot look up uid {}: {e}", self.uid)),
        }
    }

    /// The caller's whole cgroup path (a user can name its own units, so the journal keeps the
    /// path beside the unit), `None` when it cannot be told. Read after the bus vouched for the
    /// pid, and only logged.
    pub(crate) fn cgroup(&self) -> Option<String> {
        let pid = self.pid?;
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .or_else(|| {
                text.lines()
                    .find_map(|l| l.split_once(":name=systemd:").map(|(_, p)| p))
            })
            .map(str::to_owned)
    }
}

/// The innermost `.service` or `.scope` of a cgroup path.
pub(crate) fn unit_of_cgroup(path: &str) -> Option<String> {
    path.rsplit('/')
        .find(|part| part.ends_with(".service") || part.ends_with(".scope"))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::unit_of_cgroup;

    #[test]
    fn the_unit_is_the_innermost_service_or_scope() {
        assert_eq!(
            unit_of_cgroup("/user.slice/user-1000.slice/session-3.scope").as_deref(),
            Some("session-3.scope")
        );
        assert_eq!(
            unit_of_cgroup(
                "/user.slice/user-1000.slice/user@1000.service/app.slice/enginekit-broker.service"
            )
            .as_deref(),
            Some("enginekit-broker.service")
        );
        assert_eq!(unit_of_cgroup("/"), None);
    }
}
