//! Host-step parser: never panic; an accepted step's parameters digest is the digest of its
//! parameters, and the step survives print-and-parse.
#![no_main]

use enginekit_shared::wire::host_step::HostStep;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(step) = HostStep::parse(data) else {
        return;
    };
    assert_eq!(step.parameters_digest(), &step.parameters().digest());
    let bytes = step.to_bytes().expect("a parsed step prints");
    let back = HostStep::parse(&bytes).expect("a printed step parses");
    assert_eq!(back, step);
});
