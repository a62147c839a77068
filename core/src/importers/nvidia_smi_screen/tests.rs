//! nvidia-smi screens: a real 580 one (wide layout) taken while another process held the GPU,
//! and a 470 narrow one written from the reference's layout notes.

use super::*;
use crate::importers::common::text_lines::numbered_lines as lines;


const MIB: i64 = 1 << 20;

#[test]
fn a_real_580_screen_with_two_processes() {
    let s = find_screens(&lines(include_str!("../../../../traces/oom/nvidia_smi_busy.txt")));
    assert_eq!(s.len(), 1);
    let s = &s[0];
    assert_eq!(s.driver_version.as_deref(), Some("580.159.04"));
    assert_eq!(s.cuda_version.as_deref(), Some("13.0"));
    assert_eq!(s.gpus.len(), 1);
    assert_eq!(s.gpus[0].name, "NVIDIA H100 80GB HBM3");
    assert_eq!(s.gpus[0].total_bytes, Some(81559 * MIB));
    assert!(s.time_us.is_some());
    assert_eq!(s.processes.len(), 2);
    assert!(s.processes.iter().all(|p| p.kind == "C" && p.gpu == 0));
}

#[test]
fn a_470_narrow_screen_with_two_gpus() {
    let s = find_screens(&lines(include_str!("../../../../traces/oom_text/nvidia_smi_470_narrow.txt")));
    assert_eq!(s.len(), 1);
    let s = &s[0];
    assert_eq!(s.gpus.len(), 2);
    assert_eq!(s.gpus[0].used_bytes, Some(38901 * MIB));
    assert_eq!(s.gpus[1].used_bytes, Some(3 * MIB));
    assert_eq!(s.gpus[1].bus_id.as_deref(), Some("00000000:0F:00.0"));
    assert_eq!(s.processes.len(), 1);
    assert_eq!(s.processes[0].pid, 23571);
    assert_eq!(s.processes[0].used_bytes, Some(38897 * MIB));
    assert_eq!(s.time_us, Some(1_630_767_796_000_000));
}
