//! What every command prints with `--json`; the texts themselves are [`crate::text`]'s.

/// Prints `value` as pretty JSON (what `--json` does for every command).
pub fn print_json<T: serde::Serialize>(value: &T) -> std::process::ExitCode {
    match serde_json::to_string_pretty(value) {
        Ok(j) => {
            println!("{j}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memlens: cannot encode JSON: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
