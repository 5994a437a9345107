//! `nvidia-smi` output → GPUs: the CSV of `--query-gpu` (with and without `compute_cap`), the MIG
//! listing of `-L`, and a name → compute-capability table for drivers whose nvidia-smi cannot say.

use super::facts::{ComputeCapability, Fact, Gpu, MigDevice};

/// The fields asked for on current drivers, in order.
pub const QUERY_FIELDS: &[&str] = &[
    "index",
    "uuid",
    "name",
    "compute_cap",
    "memory.total",
    "memory.free",
    "driver_version",
    "mig.mode.current",
];

/// The same without `compute_cap`, which R470's nvidia-smi rejects.
pub const LEGACY_QUERY_FIELDS: &[&str] = &[
    "index",
    "uuid",
    "name",
    "memory.total",
    "memory.free",
    "driver_version",
    "mig.mode.current",
];

/// Fields the probe can do without when a driver's nvidia-smi does not know them: it then asks
/// again without the field (`compute_cap` → name table; `mig.mode.current` → unknown).
pub(crate) const OPTIONAL_FIELDS: &[&str] = &["compute_cap", "mig.mode.current", "index"];

/// The field nvidia-smi refused (`Field "compute_cap" is not a valid field to query.`, exit 2).
pub(crate) fn rejected_field(stdout: &str, stderr: &str) -> Option<String> {
    [stdout, stderr].iter().find_map(|text| {
        let rest = text.split("Field \"").nth(1)?;
        let (field, tail) = rest.split_once('"')?;
        tail.trim_start()
            .starts_with("is not a valid field")
            .then(|| field.to_owned())
    })
}

/// `--query-gpu=a,b,c` for a field list.
pub(crate) fn query_arg(fields: &[&str]) -> String {
    format!("--query-gpu={}", fields.join(","))
}

/// True when nvidia-smi refused the `compute_cap` field (R470: exit 2,
/// `Field "compute_cap" is not a valid field to query.`).
pub fn rejects_compute_cap(stdout: &str, stderr: &str) -> bool {
    rejected_field(stdout, stderr).as_deref() == Some("compute_cap")
}

/// True when nvidia-smi says there is no driver to talk to (exit 9 on a host with the utility but
/// no loaded module, or the library without a device node).
pub fn reports_no_driver(code: Option<i32>, stdout: &str, stderr: &str) -> bool {
    code == Some(9)
        || [stdout, stderr].iter().any(|t| {
            t.contains("couldn't communicate with the NVIDIA driver")
                || t.contains("NVIDIA driver is not loaded")
        })
}

/// `Some` when nvidia-smi says the loaded kernel module and the user-space driver differ
/// ("Failed to initialize NVML: Driver/library version mismatch", exit 18: the driver was
/// updated and the old module still runs), with the library version when it printed one
/// ("NVML library version: 580.95", drivers since R535).
pub fn reports_library_mismatch(stdout: &str, stderr: &str) -> Option<Option<String>> {
    let text = [stdout, stderr];
    if !text
        .iter()
        .any(|t| t.contains("Driver/library version mismatch"))
    {
        return None;
    }
    let version = text.iter().flat_map(|t| t.lines()).find_map(|line| {
        let v = line.trim().strip_prefix("NVML library version:")?.trim();
        let dotted = !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.');
        dotted.then(|| v.to_owned())
    });
    Some(version)
}

/// Parses `--query-gpu=<fields> --format=csv,noheader,nounits` output (a header line or units are
/// tolerated). Rows with too few cells, an empty uuid, or the header are skipped. A name that
/// contains commas is put back together: every field but `name` has a fixed position.
pub fn parse_query_gpu(text: &str, fields: &[&str]) -> Vec<Gpu> {
    let position = |field: &str| fields.iter().position(|f| *f == field);
    let Some(name_at) = position("name") else {
        return Vec::new();
    };
    let mut gpus = Vec::new();
    for line in text.lines() {
        let raw: Vec<&str> = line.split(',').map(str::trim).collect();
        if raw.len() < fields.len() {
            continue;
        }
        // Re-join the name's extra pieces.
        let extra = raw.len() - fields.len();
        let mut cells: Vec<String> = Vec::with_capacity(fields.len());
        cells.extend(raw[..name_at].iter().map(|s| (*s).to_owned()));
        cells.push(raw[name_at..=name_at + extra].join(", "));
        cells.extend(raw[name_at + extra + 1..].iter().map(|s| (*s).to_owned()));
        let cell = |field: &str| position(field).map(|i| cells[i].as_str());
        let uuid = cell("uuid").unwrap_or("");
        if uuid.is_empty() || uuid.eq_ignore_ascii_case("uuid") {
            continue;
        }
        let name = cell("name").unwrap_or("").to_owned();
        let compute_capability = match cell("compute_cap") {
            Some(text) => parse_compute_cap(text),
            None => compute_capability_from_name(&name).map_or_else(
                || {
                    Fact::unknown(format!(
                        "this nvidia-smi has no compute_cap field (R470) and {name:?} is not in the name table"
                    ))
                },
                Fact::known,
            ),
        };
        gpus.push(Gpu {
            index: cell("index").and_then(|t| t.parse().ok()),
            uuid: uuid.to_owned(),
            name,
            compute_capability,
            memory_total_bytes: parse_mib(cell("memory.total").unwrap_or("")),
            memory_free_bytes: parse_mib(cell("memory.free").unwrap_or("")),
            driver_version: cell("driver_version").and_then(value_cell),
            mig_enabled: match cell("mig.mode.current") {
                Some("Enabled") => Fact::known(true),
                Some("Disabled") => Fact::known(false),
                Some(other) => Fact::unknown(format!("nvidia-smi reported MIG mode {other:?}")),
                None => Fact::unknown("MIG mode was not queried"),
            },
            mig_devices: Vec::new(),
        });
    }
    gpus
}

/// A cell that holds a value, not `[N/A]`, `N/A`, `[Not Supported]` or nothing.
fn value_cell(text: &str) -> Option<String> {
    let t = text.trim();
    let placeholder =
        t.is_empty() || t.eq_ignore_ascii_case("n/a") || (t.starts_with('[') && t.ends_with(']'));
    (!placeholder).then(|| t.to_owned())
}

fn parse_compute_cap(text: &str) -> Fact<ComputeCapability> {
    match value_cell(text) {
        Some(v) => v
            .parse()
            .map_or_else(|e: String| Fact::unknown(e), Fact::known),
        None => Fact::unknown(format!("nvidia-smi reported compute_cap {text:?}")),
    }
}

/// `24564`, `24564 MiB`, `0.5` → bytes (× 1 MiB); `[N/A]`, `N/A`, empty → unknown, never 0.
pub(crate) fn parse_mib(text: &str) -> Fact<u64> {
    let t = text.trim();
    let number = t.strip_suffix("MiB").map_or(t, str::trim_end);
    let well_formed = !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && number.bytes().filter(|b| *b == b'.').count() <= 1
        && !number.starts_with('.')
        && !number.ends_with('.');
    match number.parse::<f64>() {
        Ok(mib) if well_formed => Fact::known((mib * 1_048_576.0).round() as u64),
        _ => Fact::unknown(format!("nvidia-smi reported memory {t:?}")),
    }
}

/// `nvidia-smi -L` → (GPU uuid, its MIG instances).
///
/// ```text
/// GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5d5ba0d6-…)
///   MIG 3g.40gb     Device  0: (UUID: MIG-c6d4f1ef-…)
/// ```
pub fn parse_mig_listing(text: &str) -> Vec<(String, Vec<MigDevice>)> {
    let mut out: Vec<(String, Vec<MigDevice>)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let Some(uuid) = uuid_in(trimmed) else {
            continue;
        };
        if trimmed.starts_with("GPU ") {
            out.push((uuid.to_owned(), Vec::new()));
        } else if let Some(rest) = trimmed.strip_prefix("MIG ") {
            let profile = rest.split_whitespace().next().map(str::to_owned);
            if let Some((_, devices)) = out.last_mut() {
                devices.push(MigDevice {
                    uuid: uuid.to_owned(),
                    profile,
                });
            }
        }
    }
    out
}

fn uuid_in(line: &str) -> Option<&str> {
    let start = line.find("(UUID: ")? + "(UUID: ".len();
    let end = line[start..].find(')')? + start;
    let uuid = line[start..end].trim();
    (!uuid.is_empty()).then_some(uuid)
}

/// Attaches MIG instances from `nvidia-smi -L` to their parent GPUs.
pub fn attach_mig_devices(gpus: &mut [Gpu], listing: Vec<(String, Vec<MigDevice>)>) {
    for (uuid, devices) in listing {
        if let Some(gpu) = gpus.iter_mut().find(|g| g.uuid == uuid) {
            gpu.mig_devices = devices;
        }
    }
}

/// Compute capability from a marketing name, for drivers whose nvidia-smi has no `compute_cap`
/// field. Table from NVIDIA's "CUDA GPUs — Compute Capability" page; first match wins, so longer
/// names come before their prefixes (A100 before A10).
pub(crate) fn compute_capability_from_name(name: &str) -> Option<ComputeCapability> {
    const TABLE: &[(&str, u32, u32)] = &[
        ("GB10", 12, 1),
        ("RTX PRO 6000 Blackwell", 12, 0),
        ("RTX 50", 12, 0),
        ("GB200", 10, 0),
        ("B200", 10, 0),
        ("GH200", 9, 0),
        ("H100", 9, 0),
        ("H200", 9, 0),
        ("H800", 9, 0),
        ("L40", 8, 9),
        ("L4", 8, 9),
        ("RTX 40", 8, 9),
        ("Ada Generation", 8, 9),
        ("A100", 8, 0),
        ("A800", 8, 0),
        ("A30", 8, 0),
        ("A40", 8, 6),
        ("A16", 8, 6),
        ("A10", 8, 6),
        ("A2", 8, 6),
        ("RTX A", 8, 6),
        ("RTX 30", 8, 6),
        ("T4", 7, 5),
        ("RTX 20", 7, 5),
        ("GTX 16", 7, 5),
        ("Quadro RTX", 7, 5),
        ("TITAN RTX", 7, 5),
        ("V100", 7, 0),
        ("TITAN V", 7, 0),
        ("P100", 6, 0),
        ("P40", 6, 1),
        ("P4", 6, 1),
        ("GTX 10", 6, 1),
        ("TITAN Xp", 6, 1),
        ("K80", 3, 7),
    ];
    TABLE
        .iter()
        .find(|(needle, _, _)| name.contains(needle))
        .map(|&(_, major, minor)| ComputeCapability { major, minor })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1_048_576;

    #[test]
    fn reads_every_card_converting_mib_to_bytes() {
        let text = "0, GPU-aaa, NVIDIA GeForce RTX 4090, 8.9, 24564, 23000, 580.95.05, [N/A]\n\
                    1, GPU-bbb, NVIDIA RTX A6000, 8.6, 49140, 100, 580.95.05, [N/A]\n";
        let gpus = parse_query_gpu(text, QUERY_FIELDS);
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].memory_total_bytes, Fact::known(24564 * MIB));
        assert_eq!(gpus[0].memory_free_bytes, Fact::known(23000 * MIB));
        assert_eq!(gpus[1].index, Some(1));
        assert_eq!(
            gpus[1].compute_capability.value().unwrap().to_string(),
            "8.6"
        );
        assert!(gpus[0].mig_enabled.is_unknown());
    }

    #[test]
    fn unified_memory_is_unknown_not_zero() {
        let text = "0, GPU-d991dc71-7825-0bf8-3339-cb2e7ead6a32, NVIDIA GB10, 12.1, [N/A], [N/A], 595.71.05, [N/A]";
        let g = &parse_query_gpu(text, QUERY_FIELDS)[0];
        assert!(g.memory_total_bytes.is_unknown());
        assert!(g.memory_free_bytes.is_unknown());
        assert_eq!(g.driver_version.as_deref(), Some("595.71.05"));
    }

    #[test]
    fn memory_cells() {
        assert_eq!(parse_mib("32607 MiB"), Fact::known(32607 * MIB));
        assert_eq!(parse_mib("0.5"), Fact::known(MIB / 2));
        for bad in [
            "N/A",
            "[N/A]",
            "",
            "[Not Supported]",
            "1.2.3",
            "-5",
            ".5",
            "12 GiB",
        ] {
            assert!(parse_mib(bad).is_unknown(), "{bad:?}");
        }
    }

    #[test]
    fn header_is_not_a_card_and_short_rows_are_skipped() {
        let text = "index, uuid, name, compute_cap, memory.total [MiB], memory.free [MiB], driver_version, mig.mode.current\n\
                    0, GPU-x, NVIDIA H100 80GB HBM3, 9.0, 81559 MiB, 81000 MiB, 580.65.06, Disabled\n\
                    0, GPU-y, short\n\
                    0, , NVIDIA empty uuid, 9.0, 1, 1, 580, Disabled\n";
        let gpus = parse_query_gpu(text, QUERY_FIELDS);
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].mig_enabled, Fact::known(false));
    }

    #[test]
    fn a_name_with_commas_does_not_shift_columns() {
        let text = "0, GPU-z, NVIDIA Weird, Name, Inc, 8.0, 40960, 40000, 535.183.01, Enabled";
        let g = &parse_query_gpu(text, QUERY_FIELDS)[0];
        assert_eq!(g.name, "NVIDIA Weird, Name, Inc");
        assert_eq!(g.compute_capability.value().unwrap().to_string(), "8.0");
        assert_eq!(g.mig_enabled, Fact::known(true));
    }

    #[test]
    fn legacy_fields_take_cc_from_the_name_table() {
        let text = "0, GPU-r470, Tesla T4, 15109, 15000, 470.182.03, [N/A]\n\
                    1, GPU-r470b, Some Future GPU, 1000, 1000, 470.182.03, [N/A]";
        let gpus = parse_query_gpu(text, LEGACY_QUERY_FIELDS);
        assert_eq!(
            gpus[0].compute_capability.value().unwrap().to_string(),
            "7.5"
        );
        assert!(gpus[1].compute_capability.is_unknown());
    }

    #[test]
    fn name_table_prefers_longer_names() {
        let cc = |n| compute_capability_from_name(n).map(|c| c.to_string());
        assert_eq!(cc("NVIDIA A100-SXM4-80GB").as_deref(), Some("8.0"));
        assert_eq!(cc("NVIDIA A10").as_deref(), Some("8.6"));
        assert_eq!(cc("NVIDIA L40S").as_deref(), Some("8.9"));
        assert_eq!(cc("NVIDIA GH200 480GB").as_deref(), Some("9.0"));
    }

    #[test]
    fn detects_rejected_field_and_missing_driver() {
        assert!(rejects_compute_cap(
            "Field \"compute_cap\" is not a valid field to query.\n",
            ""
        ));
        assert!(!rejects_compute_cap("", "some other error"));
        assert_eq!(
            rejected_field(
                "Field \"mig.mode.current\" is not a valid field to query.\n\n",
                ""
            )
            .as_deref(),
            Some("mig.mode.current")
        );
        assert_eq!(rejected_field("Field is fine", ""), None);
        assert!(reports_no_driver(
            Some(9),
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n",
            ""
        ));
        assert!(!reports_no_driver(Some(0), "", ""));
    }

    #[test]
    fn mig_listing_attaches_to_parents() {
        let text = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaa)\n  MIG 3g.40gb     Device  0: (UUID: MIG-111)\n  MIG 3g.40gb     Device  1: (UUID: MIG-222)\nGPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-bbb)\n";
        let listing = parse_mig_listing(text);
        assert_eq!(listing.len(), 2);
        assert_eq!(listing[0].1.len(), 2);
        assert_eq!(listing[0].1[1].uuid, "MIG-222");
        assert_eq!(listing[0].1[0].profile.as_deref(), Some("3g.40gb"));
        assert!(listing[1].1.is_empty());
    }
}
