//! Kill -9 of the broker at every checkpoint of a setup, then a restart, on a SIMULATED GPU HOST
//! (see setup_support). The broker's test hook `ENGINEKIT_TEST_KILL_AT=<phase>` sends the broker
//! SIGKILL right after the record reached that phase. Each run must end `ready`, continue the
//! same operation, and leave nothing behind that is not in the final state.
// bench: exclusive=host-cdi
// bench: shared=host-packages,host-accounts,host-daemon-json

#[path = "setup_support/mod.rs"]
mod setup_support;

use std::os::unix::process::ExitStatusExt;

use setup_support::*;

const CHECKPOINTS: [&str; 5] = [
    "preparing-environment",
    "pulling-image",
    "verifying",
    "activating",
    "ready",
];

#[test]
fn a_broker_killed_at_each_checkpoint_resumes_to_ready_without_leftovers() {
    let host = SimulatedGpuHost::start();
    for point in CHECKPOINTS {
        let before: Vec<_> = host
            .operations()
            .into_iter()
            .map(|o| o["operation_id"].clone())
            .collect();
        let killed = host
            .enginekit(&["setup", "--engine", "vllm", "--yes", "--json"])
            .env("ENGINEKIT_TEST_KILL_AT", point)
            .output()
            .expect("run enginekit");
        assert_eq!(
            killed.status.signal(),
            Some(9),
            "the hook did not kill at {point}: {}",
            describe(&killed)
        );
        let ops = host.operations();
        let unfinished: Vec<_> = ops
            .iter()
            .filter(|o| !before.contains(&o["operation_id"]))
            .collect();
        assert_eq!(unfinished.len(), 1, "one new record: {unfinished:?}");
        assert_eq!(
            unfinished[0]["phase"], point,
            "the record was left at {point}"
        );
        let killed_id = unfinished[0]["operation_id"].clone();

        let again = host.run(&["setup", "--engine", "vllm", "--yes", "--json"]);
        let result = result_of(&again);
        assert_eq!(
            result["phase"],
            "ready",
            "after a kill at {point}: {}",
            describe(&again)
        );
        if point != "ready" {
            assert_eq!(
                result["operation_id"], killed_id,
                "the same operation continues after a kill at {point}"
            );
        }
        // Exactly the final state: both images, the ready record, no container, no unfinished record.
        assert!(host.image_present(&host.engine_ref), "{point}");
        assert!(host.image_present(&host.probe_ref), "{point}");
        assert_eq!(
            host.installation().expect("record")["status"],
            "ready",
            "{point}"
        );
        assert!(
            host.containers().is_empty(),
            "leftover containers after {point}: {:?}",
            host.containers()
        );
        let open: Vec<_> = host
            .operations()
            .into_iter()
            .filter(|o| {
                !["ready", "removed", "failed", "cancelled"]
                    .contains(&o["phase"].as_str().unwrap_or(""))
            })
            .collect();
        assert!(
            open.is_empty(),
            "unfinished records after {point}: {open:?}"
        );
        let owner = host
            .operations()
            .into_iter()
            .find(|o| o["operation_id"] == killed_id)
            .expect("the killed record");
        let owned = owner["owned_resources"].to_string();
        if ["preparing-environment", "pulling-image"].contains(&point) {
            assert!(
                owned.contains(&host.probe_ref),
                "the GPU-check image it pulled is recorded as its own: {owned}"
            );
        }

        // Back to a clean host for the next checkpoint; the removal takes everything back.
        let remove = host.run(&["remove", "--engine", "vllm", "--yes", "--json"]);
        assert_eq!(
            result_of(&remove)["phase"],
            "removed",
            "{}",
            describe(&remove)
        );
        assert!(
            !host.image_present(&host.engine_ref) && !host.image_present(&host.probe_ref),
            "{point}"
        );
        assert!(host.installation().is_none());
    }
}

#[test]
fn a_removal_killed_midway_finishes_on_the_next_run() {
    let host = SimulatedGpuHost::start();
    let setup = host.run(&["setup", "--engine", "vllm", "--yes", "--json"]);
    assert_eq!(result_of(&setup)["phase"], "ready", "{}", describe(&setup));
    let killed = host
        .enginekit(&["remove", "--engine", "vllm", "--yes", "--json"])
        .env("ENGINEKIT_TEST_KILL_AT", "removed")
        .output()
        .expect("run enginekit");
    assert_eq!(killed.status.signal(), Some(9), "{}", describe(&killed));
    // Killed right after the removal was committed: the next run has nothing left to do.
    let again = host.run(&["remove", "--engine", "vllm", "--yes", "--json"]);
    assert_eq!(
        result_of(&again)["phase"],
        "removed",
        "{}",
        describe(&again)
    );
    assert!(!host.image_present(&host.engine_ref));
    assert!(host.installation().is_none());
}
