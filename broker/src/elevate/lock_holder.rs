//! Who holds the package manager's lock while the helper's job waits for it: `/proc/locks`
//! matched against the lock files' device and inode, and `/proc/<pid>/comm` for the name. All of
//! it is world-readable, so the broker finds it without privilege while it follows the job, and
//! shows "waiting for another package manager: NAME (pid N)" while apt or dnf waits
//! (`DPkg::Lock::Timeout`). It only reports; it never breaks a lock.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The apt/dpkg locks and the rpm database lock that dnf and rpm take.
const LOCKS: &[&str] = &[
    "/var/lib/dpkg/lock-frontend",
    "/var/lib/dpkg/lock",
    "/var/lib/apt/lists/lock",
    "/var/cache/apt/archives/lock",
    "/var/lib/rpm/.rpm.lock",
];
/// The helper's package managers, as `/proc/<pid>/comm` names them.
const PACKAGE_MANAGERS: &[&str] = &["apt-get", "dpkg", "dnf", "dnf5"];

/// A process holding one of the locks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockHolder {
    pub(crate) pid: u32,
    pub(crate) name: String,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pid {})", self.name, self.pid)
    }
}

/// `major:minor:inode` as `/proc/locks` prints it (hex, hex, decimal).
fn lock_key(dev: u64, ino: u64) -> String {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    format!("{major:02x}:{minor:02x}:{ino}")
}

/// The holders listed in `/proc/locks` text for the given `major:minor:inode` keys. Waiters
/// (`->` lines) and OFD locks (pid −1) are skipped.
fn holders_in(proc_locks: &str, keys: &[String]) -> Vec<u32> {
    let mut pids = Vec::new();
    for line in proc_locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) == Some(&"->") {
            continue;
        }
        // id: TYPE ADVISORY|MANDATORY READ|WRITE pid dev:inode start end
        let (Some(pid), Some(key)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        if !keys.iter().any(|k| k == key) {
            continue;
        }
        if let Ok(pid) = pid.parse::<u32>() {
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }
    pids
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name is in parentheses and may contain spaces: the fields after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is `root` or one of its descendants.
fn descends_from(mut pid: u32, root: u32) -> bool {
    for _ in 0..64 {
        if pid == root {
            return true;
        }
        match parent_of(pid) {
            Some(parent) if parent > 1 && parent != pid => pid = parent,
            _ => return false,
        }
    }
    false
}

fn name_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The first process holding one of `locks` that is not `ours` or one of its descendants.
fn foreign_holder(locks: &[&str], ours: u32) -> Option<LockHolder> {
    let keys: Vec<String> = locks
        .iter()
        .filter_map(|p| std::fs::metadata(Path::new(p)).ok())
        .map(|m| lock_key(m.dev(), m.ino()))
        .collect();
    if keys.is_empty() {
        return None;
    }
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    holders_in(&text, &keys)
        .into_iter()
        .find(|pid| !descends_from(*pid, ours))
        .map(|pid| LockHolder {
            pid,
            name: name_of(pid),
        })
}

/// Whether a child of `helper` is one of its package managers (which then waits for the lock).
fn runs_package_manager(helper: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .any(|pid| {
            parent_of(pid) == Some(helper) && PACKAGE_MANAGERS.contains(&name_of(pid).as_str())
        })
}

/// While the helper (process `helper`) runs a package manager: the process of someone else that
/// holds a package manager's lock, which that package manager is waiting for.
pub(crate) fn blocking_the_helper(helper: u32) -> Option<LockHolder> {
    if !runs_package_manager(helper) {
        return None;
    }
    foreign_holder(LOCKS, helper)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_holders_and_skips_waiters() {
        let text = "\
1: POSIX  ADVISORY  WRITE 4242 08:01:1234 0 EOF
1: -> POSIX  ADVISORY  WRITE 5151 08:01:1234 0 EOF
2: FLOCK  ADVISORY  WRITE 77 00:19:99 0 EOF
3: OFDLCK ADVISORY  READ  -1 08:01:1234 0 EOF
";
        assert_eq!(holders_in(text, &["08:01:1234".into()]), vec![4242]);
        assert_eq!(holders_in(text, &["00:19:99".into()]), vec![77]);
        assert!(holders_in(text, &["08:01:1".into()]).is_empty());
    }

    #[test]
    fn device_numbers_are_split_like_the_kernel_prints_them() {
        // makedev(8, 1)
        assert_eq!(lock_key(0x801, 5), "08:01:5");
        // makedev(259, 300): major 0x103, minor 0x12c
        let dev = (0x12c & 0xff) | (0x103 << 8) | ((0x12c & !0xff) << 12);
        assert_eq!(lock_key(dev, 7), "103:12c:7");
    }

    #[test]
    fn a_lock_held_by_another_process_is_found_with_its_name() {
        // A real POSIX lock held by a real child process (python3's fcntl.lockf).
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("lock");
        std::fs::write(&lock, b"").unwrap();
        let mut child = std::process::Command::new("/usr/bin/python3")
            .args([
                "-c",
                "import fcntl,sys,time; f=open(sys.argv[1],'w'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(30)",
            ])
            .arg(&lock)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "locked");
        let path = lock.to_str().unwrap();
        // No process has pid u32::MAX: nothing is the helper's.
        let holder = foreign_holder(&[path], u32::MAX);
        let pid = child.id();
        let ours = foreign_holder(&[path], pid);
        child.kill().unwrap();
        child.wait().unwrap();
        let holder = holder.expect("the holder is found");
        assert_eq!(holder.pid, pid);
        assert!(holder.name.starts_with("python3"), "{holder}");
        assert_eq!(
            ours, None,
            "the helper's own process is not a foreign holder"
        );
    }
}
