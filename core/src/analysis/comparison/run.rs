//! The run overview of a report holding several ranks of one job: each snapshot file is a
//! rank (numbered from its file name, from the `rank` its script wrote into `user_metadata`, or
//! by upload order), with its peak, and the spread across ranks. Built from file summaries
//! only, so a report of many large ranks never loads their tables for it.

use memlens_api::{DeviceSummary, FileSummary, RankPeak, RankSource, RunOverview};
use polars_core::prelude::*;

/// The worst rank is flagged when it is this fraction above the median …
const IMBALANCE_FRACTION: f64 = 0.10;
/// … and by at least this many bytes (small runs jitter by a few blocks).
const IMBALANCE_MIN_BYTES: i64 = 64 << 20;

use crate::names::{rank_from_file_name, rank_in_metadata};

/// The first rank any entry's `user_metadata` states (the `event_notes` table).
pub fn metadata_rank(event_notes: &DataFrame) -> PolarsResult<Option<u32>> {
    if event_notes.height() == 0 {
        return Ok(None);
    }
    let meta = event_notes.column("user_metadata")?.str()?;
    Ok(meta.iter().flatten().find_map(rank_in_metadata))
}

/// The ranks when every file has a distinct one.
fn distinct(ranks: Vec<Option<u32>>) -> Option<Vec<u32>> {
    let ranks: Vec<u32> = ranks.into_iter().collect::<Option<_>>()?;
    let mut sorted = ranks.clone();
    sorted.sort_unstable();
    sorted.dedup();
    (sorted.len() == ranks.len()).then_some(ranks)
}

/// The device of a file with the highest allocated peak (the lowest-numbered among equals; a GPU
/// before pinned host memory).
pub fn busiest_device(f: &FileSummary) -> Option<&DeviceSummary> {
    f.devices
        .iter()
        .max_by_key(|d| (d.device != memlens_api::HOST_DEVICE, d.peak_allocated_bytes, -d.device))
}

/// The rank of each file and where the numbers came from.
pub fn assign_ranks(files: &[&FileSummary]) -> (Vec<u32>, RankSource) {
    if let Some(r) = distinct(files.iter().map(|f| rank_from_file_name(&f.file)).collect()) {
        return (r, RankSource::FileName);
    }
    if let Some(r) = distinct(files.iter().map(|f| f.source.rank).collect()) {
        return (r, RankSource::UserMetadata);
    }
    ((0..files.len() as u32).collect(), RankSource::UploadOrder)
}

/// The overview of a report of several allocator snapshots (the ranks; an Nsight export or a
/// profiler trace beside them is another view of a run, not a rank); `None` with fewer than two.
pub fn run_overview(files: &[FileSummary]) -> Option<RunOverview> {
    let (indices, snapshots): (Vec<usize>, Vec<&FileSummary>) = files
        .iter()
        .enumerate()
        .filter(|(_, f)| f.format.is_pytorch_snapshot())
        .unzip();
    if snapshots.len() < 2 {
        return None;
    }
    let (numbers, rank_source) = assign_ranks(&snapshots);
    let mut ranks: Vec<RankPeak> = snapshots
        .iter()
        .zip(numbers)
        .zip(indices)
        .map(|((f, rank), file_index)| {
            let busiest = busiest_device(f);
            RankPeak {
                rank,
                file: f.file.clone(),
                file_index,
                device: busiest.map_or(0, |d| d.device),
                peak_allocated_bytes: busiest.map_or(0, |d| d.peak_allocated_bytes),
                peak_reserved_bytes: busiest.map_or(0, |d| d.peak_reserved_bytes),
                oom_count: f.devices.iter().map(|d| d.oom_count).sum(),
            }
        })
        .collect();
    ranks.sort_by_key(|r| r.rank);
    let mut peaks: Vec<i64> = ranks.iter().map(|r| r.peak_allocated_bytes).collect();
    peaks.sort_unstable();
    let n = peaks.len();
    let median = if n % 2 == 1 {
        peaks[n / 2]
    } else {
        (peaks[n / 2 - 1] + peaks[n / 2]) / 2
    };
    let (min, max) = (peaks[0], peaks[n - 1]);
    // The lowest-numbered rank among those at the maximum.
    let worst = ranks
        .iter()
        .find(|r| r.peak_allocated_bytes == max)
        .map_or(0, |r| r.rank);
    let above = if median > 0 {
        (max - median) as f64 / median as f64
    } else {
        0.0
    };
    Some(RunOverview {
        ranks,
        rank_source,
        worst_rank: worst,
        median_peak_bytes: median,
        min_peak_bytes: min,
        max_peak_bytes: max,
        spread_bytes: max - min,
        worst_above_median: above,
        imbalanced: above > IMBALANCE_FRACTION && max - median >= IMBALANCE_MIN_BYTES,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_read_from_the_names_people_give_rank_files() {
        for (name, rank) in [
            ("rank0.pickle", Some(0)),
            ("rank_1_snapshot.pickle", Some(1)),
            ("out/snapshot-rank-12.pickle.gz", Some(12)),
            ("RANK.3.pickle", Some(3)),
            ("ddp_rank7.pickle.gz", Some(7)),
            ("cranky3.pickle", None),
            ("gpt_train.pickle", None),
            ("ranking.pickle", None),
        ] {
            assert_eq!(rank_from_file_name(name), rank, "{name}");
        }
    }

    #[test]
    fn the_first_rank_a_note_states_is_the_files() {
        let notes = DataFrame::new(
            3,
            vec![
                Column::new("row".into(), vec![0u32, 5, 9]),
                Column::new("user_metadata".into(), vec!["category=input", "rank=6", "rank=7"]),
            ],
        )
        .expect("frame");
        assert_eq!(metadata_rank(&notes).expect("notes"), Some(6));
        assert_eq!(metadata_rank(&DataFrame::empty()).expect("empty"), None);
    }

    #[test]
    fn ranks_are_read_from_user_metadata() {
        for (meta, rank) in [
            ("rank=3", Some(3)),
            ("{\"rank\": 5, \"world_size\": 8}", Some(5)),
            ("global_rank: 11", Some(11)),
            ("category=activation", None),
            ("local_rankings=2", None),
        ] {
            assert_eq!(rank_in_metadata(meta), rank, "{meta}");
        }
    }
}
