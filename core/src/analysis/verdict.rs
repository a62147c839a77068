//! A device's verdict: the one or two sentences a report leads with. An OOM's own verdict
//! (cause, phase, biggest live category, first remedy) when the device ran out; else the most
//! important finding: a leak, fragmentation at the peak, or what the peak is made of.

use memlens_api::{stack_headline, Category, DeviceSummary};

use super::oom_cause::human;

/// Fragmentation at the peak worth leading with: most free memory out of reach, and the free
/// part a real share of what is reserved.
const FRAGMENTED_INDEX: f64 = 0.5;

pub fn device_verdict(d: &DeviceSummary) -> String {
    if let Some(o) = d.ooms.first() {
        let more = match d.ooms.len() {
            1 => String::new(),
            n => format!(" ({n} OOMs on this device; the first is shown.)"),
        };
        return format!("{}{more}", o.remedy);
    }
    if let Some(l) = d.leaks.first() {
        return format!(
            "Leak: {} piles up per iteration from {} ({} live at the end in {} allocations, made over {} iterations).",
            human(l.bytes_per_iteration),
            stack_headline(l.module.as_deref(), &l.stack, l.no_stack_reason, None),
            human(l.bytes),
            l.count,
            l.iterations_seen
        );
    }
    if let Some(f) = &d.fragmentation_at_peak {
        if f.fragmentation_index >= FRAGMENTED_INDEX && f.reserved_free_bytes * 10 >= f.reserved_bytes {
            return format!(
                "Fragmentation: at the peak {} of the {} reserved is free, but the largest free block is {} \
                 (fragmentation index {:.2}).",
                human(f.reserved_free_bytes),
                human(f.reserved_bytes),
                human(f.largest_free_block_bytes),
                f.fragmentation_index
            );
        }
    }
    let mut parts: Vec<(Category, i64)> = d
        .categories
        .iter()
        .filter(|c| c.bytes_at_peak > 0)
        .map(|c| (c.category, c.bytes_at_peak))
        .collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.1));
    let total = d.peak_allocated_bytes.max(1);
    let made_of: Vec<String> = parts
        .iter()
        .take(3)
        .map(|(c, b)| {
            format!(
                "{} {} ({:.0} %)",
                c.name().replace('_', " "),
                human(*b),
                *b as f64 * 100.0 / total as f64
            )
        })
        .collect();
    if made_of.is_empty() {
        format!(
            "Peak: {} allocated, {} reserved.",
            human(d.peak_allocated_bytes),
            human(d.peak_reserved_bytes)
        )
    } else {
        format!(
            "Peak: {} allocated ({} reserved), made of {}. No OOM and no leak.",
            human(d.peak_allocated_bytes),
            human(d.peak_reserved_bytes),
            made_of.join(", ")
        )
    }
}

/// Memory beside PyTorch's reserve that an NVML log of the same report shows worth leading
/// with, when a device has neither an OOM nor a leak: at least 1 GiB and a tenth of what PyTorch
/// reserved at its peak.
pub fn lead_with_memory_outside(files: &mut [memlens_api::FileSummary], logs: &[memlens_api::GpuLogSummary]) {
    for f in files.iter_mut().filter(|f| !f.format.is_text_evidence()) {
        for d in f.devices.iter_mut().filter(|d| d.ooms.is_empty() && d.leaks.is_empty()) {
            let outside = logs
                .iter()
                .flat_map(|l| l.gpus.iter().map(move |g| (l, g)))
                .filter(|(_, g)| g.gpu == d.device)
                .filter_map(|(l, g)| Some((l, g, g.non_pytorch_peak_bytes?)))
                .max_by_key(|x| x.2);
            if let Some((log, g, bytes)) = outside {
                let total = g.total_bytes.unwrap_or(0);
                if bytes >= 1 << 30 && bytes * 10 >= d.peak_reserved_bytes {
                    d.verdict =
                        format!(
                        "Outside PyTorch: up to {} of this GPU{} was held beside PyTorch's reserve (other processes, \
                         the CUDA context, NCCL or other libraries: {}). {}",
                        human(bytes),
                        if total > 0 { format!("'s {}", human(total)) } else { String::new() },
                        log.file,
                        d.verdict
                    );
                }
            }
        }
    }
}
