//! Objects encoded during the analyses (`EarlyObjects`), and a trace that lets go of its
//! addresses before its usage series is made: each stored as the storing stage would store it.

use polars_core::prelude::*;

use super::*;

#[test]
fn frames_encoded_during_the_analyses_are_stored_as_the_storing_stage_would_store_them() {
    // A trace with timestamps, and one without (PyTorch 1.13's shape: the time axis is the
    // entry order, a column shared with the events', never made twice).
    for (trace, replay_running) in [
        ("leak.pickle", true),
        ("leak.pickle", false),
        ("mlp_train.pt113_shape.pickle", true),
    ] {
        let id = &rid("0000000000000000000000000000000c");
        let (_root, store) = store_with_report(id);
        let mut w = store.data_writer(id).expect("writer");
        let early_objects = EarlyObjects::default();
        let mut keep = KeepingSink::new(w.as_mut(), &early_objects);
        let path = memlens_tests_trace(trace);
        pipeline_for(&early_objects, while_others_run(replay_running), false)
            .run(vec![Input::path(&path)], &mut keep)
            .expect("run");
        let (early_keys, frames) = (std::mem::take(&mut keep.early_keys), std::mem::take(&mut keep.frames));
        w.commit().expect("commit");
        let mut all: Vec<&String> = frames.iter().map(|(key, _)| key).collect();
        all.sort();
        // The frames; the segment objects encoded early are the next test's.
        let mut early: Vec<&String> = early_keys.iter().filter(|k| !k.contains("/segments/")).collect();
        early.sort();
        // While the replay runs, what is final is encoded (how much depends on the threads'
        // timing); else nothing is. Either way every frame is stored as the storing stage would.
        if replay_running {
            assert!(early.iter().all(|k| all.contains(k)), "{trace}: {early:?}");
        } else {
            assert!(early.is_empty(), "{trace}: {early:?}");
        }
        assert!(!frames.is_empty());
        for (key, want) in &frames {
            let got = read_parquet(store.as_ref(), id, key).expect("stored");
            assert!(got.equals_missing(want), "{trace} {key} differs after a round trip");
            if key.ends_with("usage.parquet") && trace.contains("pt113") {
                // No timestamps: the entry order as the time axis, one i64 column.
                let time = got.column("time").expect("time");
                assert_eq!(time.dtype(), &DataType::Int64, "{key}");
                let order: Vec<i64> = time.i64().expect("i64").into_no_null_iter().collect();
                assert!(order.iter().copied().eq(0..order.len() as i64), "{key}");
            } else if key.ends_with("usage.parquet") {
                // The times as the events hold them: µs after the first (u32), and the first
                // as one scalar that is never made into a column.
                let after = got.column("time_after_first").expect("time_after_first");
                assert_eq!(after.dtype(), &DataType::UInt32, "{key}");
                assert!(got
                    .column("first_time")
                    .expect("first_time")
                    .as_scalar_column()
                    .is_some());
                assert!(got.column("time").is_err(), "{key}");
            }
        }
    }
}

#[test]
fn segment_objects_encoded_during_the_analyses_are_the_bytes_the_storing_stage_writes() {
    // Every stored checkpoint of a report, by key, and the keys encoded early.
    // Early: handed over while the replay runs and, at the latest, before the trace lets go of
    // its addresses (every one of them, whatever the threads did); late: by the storing stage.
    let stored = |early: bool| {
        let id = &rid("0000000000000000000000000000000d");
        let (root, store) = store_with_report(id);
        let mut w = store.data_writer(id).expect("writer");
        let early_objects = EarlyObjects::default();
        let mut keep = KeepingSink::new(w.as_mut(), &early_objects);
        let path = memlens_tests_trace("leak.pickle");
        pipeline_for(&early_objects, while_others_run(early), early)
            .run(vec![Input::path(&path)], &mut keep)
            .expect("run");
        let early_keys = std::mem::take(&mut keep.early_keys);
        w.commit().expect("commit");
        let cursors: Vec<usize> = read_json(store.as_ref(), id, "f0/d0/segments.json").expect("cursors");
        let objects: Vec<(String, Vec<u8>)> = (0..cursors.len())
            .map(|k| {
                let key = format!("f0/d0/segments/{k}.parquet");
                let bytes = store.read_data(id, &key).expect("read").expect("stored");
                (key, bytes)
            })
            .collect();
        (root, early_keys, objects)
    };
    let (_root, early_keys, early) = stored(true);
    let (_root, late_keys, late) = stored(false);
    assert!(early.len() > 1, "{} checkpoints", early.len());
    for (key, _) in &early {
        assert!(early_keys.contains(key), "{key} was not encoded during the analyses");
    }
    assert!(late_keys.iter().all(|k| !k.contains("/segments/")), "{late_keys:?}");
    assert!(
        early == late,
        "the objects encoded early differ from the storing stage's"
    );
}

#[test]
fn a_sink_that_lets_the_addresses_go_stores_the_same_bytes() {
    // Each device's usage series made after the trace let go of its addresses, and the segment
    // objects encoded just before (all of them when the analysis thread encoded none early):
    // every stored object the same bytes as when the trace stays whole.
    let stored = |trace: &str, lets_go: bool, others_running: bool| {
        let id = &rid("0000000000000000000000000000000e");
        let (root, store) = store_with_report(id);
        let mut w = store.data_writer(id).expect("writer");
        let early_objects = EarlyObjects::default();
        let mut keep = KeepingSink::new(w.as_mut(), &early_objects);
        let path = memlens_tests_trace(trace);
        pipeline_for(&early_objects, while_others_run(others_running), lets_go)
            .run(vec![Input::path(&path)], &mut keep)
            .expect("run");
        let events = keep.written[0].frames[0].clone();
        w.commit().expect("commit");
        let cursors: Vec<usize> = read_json(store.as_ref(), id, "f0/d0/segments.json").expect("cursors");
        let mut keys: Vec<String> = ["usage.parquet", "lifetimes.parquet", "overview.json", "segments.json"]
            .iter()
            .map(|name| format!("f0/d0/{name}"))
            .collect();
        keys.extend((0..cursors.len()).map(|k| format!("f0/d0/segments/{k}.parquet")));
        let objects: Vec<(String, Vec<u8>)> = keys
            .into_iter()
            .map(|key| {
                let bytes = store.read_data(id, &key).expect("read").expect("stored");
                (key, bytes)
            })
            .collect();
        drop(root);
        (events, objects)
    };
    for trace in ["leak.pickle", "mlp_train.pt113_shape.pickle"] {
        let (whole, want) = stored(trace, false, true);
        assert!(whole.column("addr_units").is_ok() || whole.column("addr").is_ok());
        for others_running in [true, false] {
            let (let_go, got) = stored(trace, true, others_running);
            assert!(
                let_go.column("addr_units").is_err() && let_go.column("addr").is_err(),
                "{trace}: the addresses stayed"
            );
            assert!(
                got.len() >= 5 && got.len() == want.len(),
                "{trace}: {} objects",
                got.len()
            );
            for ((key, want), (_, got)) in want.iter().zip(&got) {
                assert!(want == got, "{trace} {key} differs (others running: {others_running})");
            }
        }
    }
}
