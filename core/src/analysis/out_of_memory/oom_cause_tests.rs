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

/// Under a 6 GiB cap on an 80 GiB device, a step that needs far more than the device: raising
/// the cap is offered only as far as the device goes, and the verdict says the device itself is
/// short; remedies sized from what was live that save under a hundredth of what is lacking
/// (checkpointing 8 blocks of a few bytes) are not listed.
#[test]
fn no_remedy_is_larger_than_the_device_or_smaller_than_a_hundredth_of_the_need() {
    let f = OomFacts {
        requested: GIB,
        allocated: Some(5 * GIB),
        reserved: Some(6 * GIB),
        device_free: Some(70 * GIB),
        device_total: Some(80 * GIB),
        allowed: Some(6 * GIB),
        ..Default::default()
    };
    assert_eq!(classify(&f), OomCause::Limit);
    let fits = memlens_api::OomFit {
        batch_fraction: 0.005,
        limit_bytes: 6 * GIB,
        fixed_bytes: GIB,
        batch_bytes: 900 * GIB,
        how: String::new(),
        generation: None,
    };
    let live = LiveAtFailure {
        parameter: GIB,
        activation: 24,
        layers: Some(8),
        ..Default::default()
    };
    let r = remedies(OomCause::Limit, &f, OomPhase::Forward, Some(&live), Some(&fits));
    let cap = r
        .iter()
        .find(|r| r.action == memlens_api::RemedyAction::RaiseCap)
        .expect("raise the cap");
    assert_eq!(cap.saves_bytes, 74 * GIB, "{}", cap.note);
    assert!(cap.note.contains("even the whole device"), "{}", cap.note);
    assert!(
        r.iter()
            .all(|x| x.action != memlens_api::RemedyAction::ActivationCheckpointing),
        "{r:#?}"
    );
    let v = verdict(OomCause::Limit, &f, OomPhase::Forward, Some(&live), &r, Some(&fits));
    assert!(v.contains("even the whole device") && !v.contains("900"), "{v}");
}
