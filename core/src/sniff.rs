//! Format detection by content (magic bytes and leading text), separate from parsing.

/// Every input format memlens knows by sight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `torch.cuda.memory._dump_snapshot` pickle.
    #[default]
    PytorchSnapshot,
    /// `nsys export --type sqlite`.
    NsysSqlite,
    /// `nsys export --type json` (one JSON object per line).
    NsysJson,
    /// `nvidia-smi --query-gpu=… --format=csv`.
    NvidiaSmiCsv,
    /// `nvidia-smi dmon` text.
    NvidiaSmiDmon,
    /// pynvml JSON lines.
    NvmlJsonLines,
    /// PyTorch profiler Chrome trace JSON.
    ProfilerTrace,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::PytorchSnapshot => "pytorch_snapshot",
            Format::NsysSqlite => "nsys_sqlite",
            Format::NsysJson => "nsys_json",
            Format::NvidiaSmiCsv => "nvidia_smi_csv",
            Format::NvidiaSmiDmon => "nvidia_smi_dmon",
            Format::NvmlJsonLines => "nvml_jsonl",
            Format::ProfilerTrace => "pytorch_profiler_trace",
        }
    }

    /// The format with this [`Format::name`].
    pub fn from_name(name: &str) -> Option<Format> {
        [
            Format::PytorchSnapshot,
            Format::NsysSqlite,
            Format::NsysJson,
            Format::NvidiaSmiCsv,
            Format::NvidiaSmiDmon,
            Format::NvmlJsonLines,
            Format::ProfilerTrace,
        ]
        .into_iter()
        .find(|f| f.name() == name)
    }
}

/// Guesses the format from the first bytes of the (decompressed) content.
pub fn sniff(head: &[u8]) -> Option<Format> {
    if head.len() >= 2 && head[0] == 0x80 && (2..=5).contains(&head[1]) {
        return Some(Format::PytorchSnapshot);
    }
    if head.starts_with(b"SQLite format 3\0") {
        return Some(Format::NsysSqlite);
    }
    let text = String::from_utf8_lossy(&head[..head.len().min(2048)]);
    let t = text.trim_start_matches('\u{feff}').trim_start();
    if t.starts_with("# gpu") || t.starts_with("#Date") || t.starts_with("# Date") {
        return Some(Format::NvidiaSmiDmon);
    }
    if t.starts_with("timestamp") && t.lines().next().is_some_and(|l| l.contains(',')) {
        return Some(Format::NvidiaSmiCsv);
    }
    if t.starts_with('{') || t.starts_with('[') {
        if t.contains("\"traceEvents\"") || t.contains("\"schemaVersion\"") && t.contains("\"deviceProperties\"") {
            return Some(Format::ProfilerTrace);
        }
        if t.contains("\"memory_used\"") || t.contains("\"memory_total\"") {
            return Some(Format::NvmlJsonLines);
        }
        if t.starts_with('{') && (t.contains("\"Type\"") || t.contains("\"data\"")) {
            return Some(Format::NsysJson);
        }
    }
    None
}

/// A printable description of the first bytes, for "unrecognised format" errors.
pub fn describe_head(head: &[u8]) -> String {
    let shown: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("bytes {}", shown.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_by_magic() {
        assert_eq!(sniff(&[0x80, 4, 0x95]), Some(Format::PytorchSnapshot));
        assert_eq!(sniff(&[0x80, 1]), None);
        assert_eq!(sniff(b"SQLite format 3\0..."), Some(Format::NsysSqlite));
        assert_eq!(sniff(b"timestamp, index, name\n"), Some(Format::NvidiaSmiCsv));
        assert_eq!(sniff(b"hello"), None);
    }
}
