//! Transaction lock times as Core's consensus checks them: absolute lock times (`IsFinalTx`,
//! from `ContextualCheckBlock`, measured against the median time past from BIP113 on) and
//! BIP68 relative lock times (`CalculateSequenceLocks` and `EvaluateSequenceLocks`, from
//! `ConnectBlock`), with the best chain's median times past by height (`btc_best_mtp`).

/// Lock times below this are heights, from it on Unix times (`LOCKTIME_THRESHOLD`).
pub const LOCKTIME_THRESHOLD: u32 = 500_000_000;
/// An input with this sequence waives its transaction's lock time (`SEQUENCE_FINAL`).
pub const SEQUENCE_FINAL: u32 = u32::MAX;
/// Set: the input has no relative lock (`SEQUENCE_LOCKTIME_DISABLE_FLAG`).
pub const SEQUENCE_LOCKTIME_DISABLE_FLAG: u32 = 1 << 31;
/// Set: the relative lock counts units of 512 seconds, else blocks.
pub const SEQUENCE_LOCKTIME_TYPE_FLAG: u32 = 1 << 22;
pub const SEQUENCE_LOCKTIME_MASK: u32 = 0x0000_ffff;
/// A time lock's unit is 2^9 = 512 seconds.
pub const SEQUENCE_LOCKTIME_GRANULARITY: u32 = 9;
/// Blocks whose times make a median time past.
pub const MEDIAN_TIME_SPAN: usize = 11;

/// The median of a block's time and the times of up to ten blocks before it (Core's
/// `GetMedianTimePast`; fewer near the genesis block). `times` is reordered.
pub fn median_time_past(times: &mut [u32]) -> u32 {
    debug_assert!(!times.is_empty() && times.len() <= MEDIAN_TIME_SPAN);
    times.sort_unstable();
    times[times.len() / 2]
}

/// Median times past of the best chain by height: 4 bytes (u32 little-endian) a height, as
/// the `btc_best_mtp` column family holds them.
#[derive(Clone, Copy)]
pub struct MedianTimes<'a>(pub &'a [u8]);

impl MedianTimes<'_> {
    /// The median time past of the best-chain block at `height`, if the list reaches it.
    pub fn at(&self, height: u32) -> Option<u32> {
        let at = height as usize * 4;
        let b = self.0.get(at..at + 4)?;
        Some(u32::from_le_bytes(b.try_into().unwrap()))
    }

    /// Heights the list holds.
    pub fn len(&self) -> usize {
        self.0.len() / 4
    }

    pub fn is_empty(&self) -> bool {
        self.0.len() < 4
    }
}

/// Whether a transaction with `lock_time` and its inputs' `sequences` may be in a block at
/// `height` whose lock-time cutoff is `cutoff` (`IsFinalTx`): no lock time, one already
/// passed, or every input final.
pub fn is_final(
    lock_time: u32,
    sequences: impl IntoIterator<Item = u32>,
    height: u32,
    cutoff: u32,
) -> bool {
    if lock_time == 0 {
        return true;
    }
    let reached = if lock_time < LOCKTIME_THRESHOLD {
        height
    } else {
        cutoff
    };
    lock_time < reached || sequences.into_iter().all(|s| s == SEQUENCE_FINAL)
}

/// The tightest relative lock of a transaction's inputs (`CalculateSequenceLocks`): the last
/// height and the last median time past at which it is still locked (-1: none). Fed each
/// enforced input's sequence and the height of the coin it spends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceLock {
    pub min_height: i64,
    pub min_time: i64,
}

impl Default for SequenceLock {
    fn default() -> Self {
        SequenceLock {
            min_height: -1,
            min_time: -1,
        }
    }
}

/// Whether BIP68 applies to a transaction of `version` in a block at `height` (from the CSV
/// deployment on, to versions 2 and up, read unsigned as Core reads them).
pub fn enforces_sequence_locks(version: i32, height: u32, csv_height: u32) -> bool {
    height >= csv_height && version as u32 >= 2
}

impl SequenceLock {
    /// Adds an input of `sequence` spending a coin made at `coin_height`; `mtp_before` is the
    /// median time past of the block below the coin's (of the genesis block for a coin of
    /// it), asked for only when the lock counts time. None: that median time is not known.
    pub fn add(
        &mut self,
        sequence: u32,
        coin_height: u32,
        mtp_before: impl FnOnce(u32) -> Option<u32>,
    ) -> Option<()> {
        if sequence & SEQUENCE_LOCKTIME_DISABLE_FLAG != 0 {
            return Some(());
        }
        let units = i64::from(sequence & SEQUENCE_LOCKTIME_MASK);
        if sequence & SEQUENCE_LOCKTIME_TYPE_FLAG != 0 {
            let coin_time = i64::from(mtp_before(coin_height.saturating_sub(1))?);
            let until = coin_time + (units << SEQUENCE_LOCKTIME_GRANULARITY) - 1;
            self.min_time = self.min_time.max(until);
        } else {
            self.min_height = self.min_height.max(i64::from(coin_height) + units - 1);
        }
        Some(())
    }

    /// Whether a block at `height`, whose parent's median time past is `parent_mtp`, may hold
    /// the transaction (`EvaluateSequenceLocks`).
    pub fn satisfied(&self, height: u32, parent_mtp: u32) -> bool {
        self.min_height < i64::from(height) && self.min_time < i64::from(parent_mtp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_up_to_eleven_times() {
        assert_eq!(median_time_past(&mut [7]), 7);
        assert_eq!(median_time_past(&mut [5, 1]), 5);
        assert_eq!(median_time_past(&mut [3, 1, 2]), 2);
        let mut eleven = [11, 1, 10, 2, 9, 3, 8, 4, 7, 5, 6];
        assert_eq!(median_time_past(&mut eleven), 6);
    }

    #[test]
    fn median_times_by_height() {
        let bytes: Vec<u8> = [10u32, 20, 30]
            .iter()
            .flat_map(|t| t.to_le_bytes())
            .collect();
        let m = MedianTimes(&bytes);
        assert_eq!((m.at(0), m.at(2), m.at(3)), (Some(10), Some(30), None));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn absolute_lock_times_as_is_final_tx() {
        // No lock time, or one strictly below the height (or the cutoff time).
        assert!(is_final(0, [0], 100, 0));
        assert!(is_final(99, [0], 100, 0));
        assert!(!is_final(100, [0], 100, 0));
        assert!(is_final(LOCKTIME_THRESHOLD, [0], 1, LOCKTIME_THRESHOLD + 1));
        assert!(!is_final(
            LOCKTIME_THRESHOLD + 1,
            [0],
            1,
            LOCKTIME_THRESHOLD + 1
        ));
        // Every input final waives it; one that is not keeps it.
        assert!(is_final(1_000, [SEQUENCE_FINAL, SEQUENCE_FINAL], 100, 0));
        assert!(!is_final(
            1_000,
            [SEQUENCE_FINAL, SEQUENCE_FINAL - 1],
            100,
            0
        ));
    }

    #[test]
    fn relative_locks_as_core_computes_them() {
        let no_time = |_| None;
        // Ten blocks after a coin of height 100: locked through 109, spendable at 110.
        let mut l = SequenceLock::default();
        l.add(10, 100, no_time).unwrap();
        assert_eq!(l.min_height, 109);
        assert!(!l.satisfied(109, 0) && l.satisfied(110, 0));
        // Disabled: no lock at all.
        let mut l = SequenceLock::default();
        l.add(SEQUENCE_LOCKTIME_DISABLE_FLAG | 500, 100, no_time)
            .unwrap();
        assert_eq!(l, SequenceLock::default());
        assert!(l.satisfied(0, 0));
        // Time: 3 units of 512 s after the median time past below the coin's block.
        let mut l = SequenceLock::default();
        let asked = std::cell::Cell::new(None);
        l.add(SEQUENCE_LOCKTIME_TYPE_FLAG | 3, 100, |h| {
            asked.set(Some(h));
            Some(1_000_000)
        })
        .unwrap();
        assert_eq!(asked.get(), Some(99));
        assert_eq!(l.min_time, 1_000_000 + 3 * 512 - 1);
        assert!(!l.satisfied(200, 1_000_000 + 3 * 512 - 1));
        assert!(l.satisfied(200, 1_000_000 + 3 * 512));
        // A coin of the genesis block asks for the genesis block's own median time.
        let mut l = SequenceLock::default();
        l.add(SEQUENCE_LOCKTIME_TYPE_FLAG, 0, |h| Some(h + 5))
            .unwrap();
        assert_eq!(l.min_time, 4);
        // An unknown median time is an error, not a pass.
        assert!(SequenceLock::default()
            .add(SEQUENCE_LOCKTIME_TYPE_FLAG, 7, no_time)
            .is_none());
    }

    #[test]
    fn bip68_applies_from_version_two_unsigned_and_csv_height() {
        assert!(!enforces_sequence_locks(1, 500, 1));
        assert!(enforces_sequence_locks(2, 500, 1));
        assert!(enforces_sequence_locks(-1, 500, 1));
        assert!(!enforces_sequence_locks(2, 0, 1));
    }
}
