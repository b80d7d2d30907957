//! What one call may use, and the output cap.

use std::time::Duration;

/// How often the engine's epoch advances: a call runs at least its deadline and is stopped
/// within one tick after it.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// What one call may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for the component to run.
    pub deadline: Duration,
    /// Linear memory the component may grow to.
    pub memory_bytes: usize,
    /// Bytes of text returned to the agent; longer output is cut with a marker.
    pub output_bytes: usize,
    /// Filesystem calls the component may make; past them every filesystem call fails.
    pub host_calls: u64,
    /// Files and directories the component may hold open at once.
    pub open_files: usize,
    /// Distinct refusals recorded in the audit trail per call (a refusal repeated exactly is
    /// counted, not recorded again); past them the call is stopped and rolled back.
    pub audit_records: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(30),
            memory_bytes: 512 << 20,
            output_bytes: 1 << 20,
            host_calls: 1_000_000,
            open_files: 1024,
            audit_records: 1000,
        }
    }
}

/// Epoch ticks in `time`, rounded up (at least one).
pub fn ticks_in(time: Duration) -> u64 {
    let ticks = time.as_nanos().div_ceil(EPOCH_TICK.as_nanos());
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

/// `text` cut to at most `max_bytes` (at a character boundary) with a marker saying so.
pub fn cap_output(text: &mut String, max_bytes: usize) {
    if text.len() <= max_bytes {
        return;
    }
    let total = text.len();
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!(
        "\n[output truncated at {} KiB of {} KiB: narrow the request, for example with a smaller window or a more specific pattern]",
        max_bytes / 1024,
        total / 1024
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_at_a_character_boundary() {
        let mut text = "é".repeat(10);
        cap_output(&mut text, 5);
        assert!(text.starts_with("éé\n[output truncated"), "{text}");
        let mut short = "abc".to_owned();
        cap_output(&mut short, 5);
        assert_eq!(short, "abc");
    }

    #[test]
    fn deadlines_round_up_to_ticks() {
        let ticks = |millis| ticks_in(Duration::from_millis(millis));
        assert_eq!(ticks(1), 1);
        assert_eq!(ticks(10), 1);
        assert_eq!(ticks(11), 2);
        assert_eq!(ticks(30_000), 3000);
    }
}
