//! The X display of a desktop test container, as both desktop tests drive it: the user's
//! commands on display :1 (xdotool, ImageMagick's import), polkit-gnome's dialog found by its
//! title, screenshots kept among the test artifacts and compared with the reviewed pictures.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use enginekit_integration::bench;
use enginekit_integration::output::describe;
use enginekit_integration::systemd::{docker, BootedSystemd};

/// The reviewed picture of the dialog, shown in the README (`EK_BLESS=1` replaces it).
pub(crate) const REFERENCE: &str = "docs/img/polkit-dialog.png";
/// The dialog's icon and message in a 1024x768 screen (the dialog is centred; no window manager).
pub(crate) const MESSAGE_AREA: &str = "640x110+195+262";

/// `$CARGO_TARGET_DIR/test-artifacts/desktop`, created.
pub(crate) fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| bench::workspace_root().join("target"));
    let dir = target.join("test-artifacts/desktop");
    std::fs::create_dir_all(&dir).expect("artifacts folder");
    dir
}

/// The display of `user` in `booted`.
pub(crate) struct Screen<'a> {
    pub booted: &'a BootedSystemd,
    pub user: &'a str,
}

impl Screen<'_> {
    /// Runs `script` with DISPLAY=:1 as the user; what it printed, trimmed.
    pub(crate) fn x(&self, script: &str) -> String {
        let out = self
            .booted
            .sh_as(self.user, &format!("export DISPLAY=:1; {script}"));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The agent's dialog window once it is shown, drawn and focused for typing; `why_not`
    /// says what to show when it never comes within `within`.
    pub(crate) fn dialog(&self, within: Duration, why_not: impl Fn() -> String) -> String {
        let deadline = Instant::now() + within;
        loop {
            let found = self.x("xdotool search --onlyvisible --name '^Authenticate$' 2>/dev/null");
            if let Some(window) = found.lines().next() {
                std::thread::sleep(Duration::from_millis(800));
                self.x(&format!("xdotool windowfocus --sync {window}"));
                return window.to_owned();
            }
            assert!(Instant::now() < deadline, "no dialog: {}", why_not());
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// A screenshot of the whole screen, kept as `name` among the artifacts; its path.
    pub(crate) fn screenshot(&self, name: &str) -> PathBuf {
        self.x(&format!("import -window root /tmp/{name}"));
        let local = artifacts().join(name);
        let out = docker(&[
            "cp",
            &format!("{}:/tmp/{name}", self.booted.name()),
            &local.display().to_string(),
        ]);
        assert!(out.status.success(), "{}", describe(&out));
        local
    }

    /// How many pixels of `area` differ between the screenshot `name` and the reviewed picture
    /// `reference` (ImageMagick's compare inside the container).
    pub(crate) fn difference(&self, name: &str, reference: &str, area: &str) -> u64 {
        self.booted.copy(
            &bench::workspace_root().join(reference),
            "/tmp/reference.png",
        );
        let text = self.booted.sh(&format!(
            "cd /tmp && chmod 644 reference.png && \
             convert {name} -crop {area} +repage shown.png && \
             convert reference.png -crop {area} +repage expected.png && \
             compare -metric AE shown.png expected.png null: 2>&1; true"
        ));
        text.trim()
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("compare: {text}")) as u64
    }
}
