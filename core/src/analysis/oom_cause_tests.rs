//! The classifier and the remedies on hand-set numbers: each cause from its figures, and only
//! fragmentation told about allocator settings.

use memlens_api::{OomCause, OomPhase};

use super::oom_cause::*;

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

fn mentions_allocator_settings(text: &str) -> bool {
    [
        "ALLOC_CONF",
        "expandable_segments",
        "max_split_size",
        "garbage_collection",
    ]
    .iter()
    .any(|k| text.contains(k))
}

#[test]
fn each_cause_from_its_numbers() {
    let split = OomFacts {
        requested: 2 * GIB,
        allocated: Some(3 * GIB),
        reserved: Some(6 * GIB),
        reserved_free: Some(3 * GIB),
        largest_free_block: Some(20 * MIB),
        device_free: Some(100 * GIB),
        ..Default::default()
    };
    assert_eq!(classify(&split), OomCause::Fragmentation);
    // The same free bytes as a sliver of a large reserve: not fragmentation; the device had
    // the request free, so a cap stopped it.
    let capped = OomFacts {
        reserved: Some(60 * GIB),
        reserved_free: Some(3 * GIB),
        ..split
    };
    assert_eq!(classify(&capped), OomCause::Limit);
    let full = OomFacts {
        device_free: Some(100 * MIB),
        device_total: Some(80 * GIB),
        ..capped
    };
    assert_eq!(classify(&full), OomCause::Capacity);
    let shared = OomFacts {
        other_processes: Some(15 * GIB),
        ..full
    };
    assert_eq!(classify(&shared), OomCause::OtherProcesses);
    let cupy = OomFacts {
        non_pytorch: Some(15 * GIB),
        ..full
    };
    assert_eq!(classify(&cupy), OomCause::NonPytorch);
    let graphs = OomFacts {
        private_pool: Some(12 * GIB),
        ..full
    };
    assert_eq!(classify(&graphs), OomCause::PrivatePool);
    let allowed = OomFacts {
        allowed: Some(61 * GIB),
        device_free: Some(0),
        ..capped
    };
    assert_eq!(classify(&allowed), OomCause::Limit);
}

#[test]
fn only_fragmentation_is_told_about_allocator_settings_and_the_verdict_names_one_cause() {
    let live = LiveAtFailure {
        parameter: GIB,
        activation: 5 * GIB,
        ..Default::default()
    };
    for cause in OomCause::ALL {
        let f = OomFacts {
            requested: 2 * GIB,
            allocated: Some(6 * GIB),
            reserved: Some(7 * GIB),
            reserved_free: Some(GIB),
            largest_free_block: Some(MIB),
            device_free: Some(100 * GIB),
            allowed: Some(8 * GIB),
            ..Default::default()
        };
        let r = remedies(cause, &f, OomPhase::Forward, Some(&live), None);
        let v = verdict(cause, &f, OomPhase::Forward, Some(&live), &r, None);
        let all: String = r.iter().map(|x| x.note.as_str()).chain([v.as_str()]).collect();
        assert_eq!(
            mentions_allocator_settings(&all),
            cause == OomCause::Fragmentation,
            "{cause}: {all}"
        );
        assert!(v.contains("activations (5.00 GiB)"), "{v}");
        let others = OomCause::ALL
            .iter()
            .filter(|c| **c != cause && **c != OomCause::Unknown);
        for other in others {
            let word = match other {
                OomCause::Fragmentation => "Fragmentation:",
                OomCause::Capacity => "Capacity:",
                OomCause::Limit => "Limit:",
                OomCause::OtherProcesses => "Other processes:",
                OomCause::NonPytorch => "Outside PyTorch:",
                OomCause::PrivatePool => "Private pools:",
                OomCause::Unknown => unreachable!(),
            };
            assert!(!v.contains(word), "{cause} verdict names {other}: {v}");
        }
    }
}
