//! Choosing the VMID of a new VM from the cycle's listing, so a create costs no
//! `GET /cluster/nextid` while the listing still shows a free id.
//!
//! What PVE does (pve-manager 9.2.11 `14a22df`, pve-cluster `7091d92`):
//! - `GET /cluster/nextid` (pve-manager `PVE/API2/Cluster.pm:1012-1051`) reads
//!   `PVE::Cluster::get_vmlist()`, every guest of the cluster (QEMU and LXC, from pmxcfs),
//!   and the datacenter.cfg option `next-id`; it answers the first id in `[lower, upper)` not
//!   in that list (`lower // 100`, `upper // 1000 * 1000`), or dies `unable to get any free
//!   VMID in range [lower, upper]`. With `vmid=N` it answers N or `VM N already exists`.
//! - It reserves nothing: no lock, no file, no timeout. Two callers get the same answer until
//!   one of them creates the guest (`/run/pve` holds only pvestatd's metrics cache:
//!   `debian/tmpfiles:2`, `PVE/PullMetric.pm:21`). So nextid is no safer than the listing.
//! - `next-id` (pve-cluster `src/PVE/DataCenterConfig.pm:203-220`, option at `:412`): `lower`
//!   inclusive (100 to 999,999,999, default 100), `upper` exclusive (100 to 1,000,000,000,
//!   default 1,000,000); writing `lower > upper` is refused (`:684-690`). `GET /cluster/options`
//!   answers it parsed (`:598`: `{lower, upper}`), and all of datacenter.cfg only with Sys.Audit
//!   on `/` (pve-manager `Cluster.pm:773-826` `get_options`; otherwise `console` and `tag-style`
//!   only). The PVE 8.4 and 9.1 schemas declare the GET answer an untyped object and the PUT's
//!   `next-id` as `[lower=<integer>] [,upper=<integer>]`.
//! - `GET /cluster/resources` lists the same guest list (`Cluster.pm:557`) but leaves out
//!   guests the token may not audit (`:588`, `VM.Audit` on `/vms/N`, which doctor requires).
//! - A create or clone at a taken id is refused before anything is made: `unable to create VM
//!   N - VM N already exists on node 'X'` (qemu-server `src/PVE/API2/Qemu.pm:1374-1375`,
//!   pve-guest-common `AbstractConfig.pm:261`, pve-cluster `Cluster.pm:785-797`; `CT N` for a
//!   container) or, for a clone, `unable to create VM N: config file already exists`
//!   (`Qemu.pm:4501-4503`).
//!
//! So proxsync takes the lowest id of the range that the listing, this install's intents in
//! flight and this cycle's earlier allocations leave free, asks nextid only when none is left,
//! and takes the next id when a create is told the id exists (someone took it after the
//! listing, or the listing could not show it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::pve::Pve;
use crate::pve::types::DatacenterOptions;

/// PVE's defaults for `next-id` (pve-cluster `DataCenterConfig.pm:203-220`).
const DEFAULT_LOWER: u32 = 100;
const DEFAULT_UPPER: u32 = 1_000_000;
/// The bounds of any VMID (pve-common `pve-vmid`: 100 to 999,999,999).
const MIN_VMID: u32 = 100;
const VMID_END: u32 = 1_000_000_000;

/// How long a site's `next-id` range is trusted before a create reads it again: the default
/// resync interval. An idle cycle never reads it.
const RANGE_MAX_AGE: Duration = Duration::from_secs(300);

/// The ids `/cluster/nextid` hands out: `lower` inclusive, `upper` exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VmidRange {
    pub lower: u32,
    pub upper: u32,
}

impl Default for VmidRange {
    fn default() -> Self {
        VmidRange {
            lower: DEFAULT_LOWER,
            upper: DEFAULT_UPPER,
        }
    }
}

impl VmidRange {
    /// The range `GET /cluster/options` describes, or `None` when the answer cannot tell it:
    /// not all of datacenter.cfg (the token lacks Sys.Audit on `/`: an absent `next-id` would
    /// not mean the defaults), or a `next-id` that does not read as a range.
    pub(crate) fn from_options(options: &DatacenterOptions) -> Option<VmidRange> {
        match &options.next_id {
            Some(value) => VmidRange::parse(value),
            None if options.mac_prefix.is_some() => Some(VmidRange::default()),
            None => None,
        }
    }

    /// `{"lower": 5000, "upper": "6000"}` as PVE answers it, or the property string
    /// `lower=5000,upper=6000` as datacenter.cfg holds it. Numbers may come as strings.
    fn parse(value: &serde_json::Value) -> Option<VmidRange> {
        let mut lower = None;
        let mut upper = None;
        let mut set = |key: &str, v: Option<u32>| -> Option<()> {
            match key {
                "lower" => lower = Some(v?),
                "upper" => upper = Some(v?),
                _ => {}
            }
            Some(())
        };
        match value {
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    let n = match v {
                        serde_json::Value::Number(n) => n.as_u64(),
                        serde_json::Value::String(s) => s.trim().parse().ok(),
                        _ => None,
                    };
                    set(key, n.and_then(|n| u32::try_from(n).ok()))?;
                }
            }
            serde_json::Value::String(s) => {
                for part in s.split(',').filter(|p| !p.trim().is_empty()) {
                    let (key, v) = part.split_once('=')?;
                    set(key.trim(), v.trim().parse().ok())?;
                }
            }
            _ => return None,
        }
        Some(VmidRange {
            lower: lower.unwrap_or(DEFAULT_LOWER).max(MIN_VMID),
            upper: upper.unwrap_or(DEFAULT_UPPER).min(VMID_END),
        })
    }
}

/// The lowest id of `range`, not below `from`, that `taken` does not hold.
pub(crate) fn lowest_free(range: VmidRange, from: u32, taken: impl Fn(u32) -> bool) -> Option<u32> {
    (from.max(range.lower)..range.upper).find(|id| !taken(*id))
}

/// A site's allocator state, long-lived across cycles (held under the site's allocation
/// mutex): its `next-id` range and when it was read.
#[derive(Default)]
pub(crate) struct SiteAllocator {
    range: Option<(Instant, Option<VmidRange>)>,
}

impl SiteAllocator {
    /// The site's range, read with `GET /cluster/options` when not read in the last
    /// [`RANGE_MAX_AGE`]. `None`: unknown (the read failed or could not tell): ask nextid.
    pub(crate) async fn range(&mut self, client: &impl Pve) -> Option<VmidRange> {
        if let Some((at, range)) = self.range
            && at.elapsed() < RANGE_MAX_AGE
        {
            return range;
        }
        let range = match client.cluster_options().await {
            Ok(options) => {
                let range = VmidRange::from_options(&options);
                if range.is_none() {
                    tracing::warn!(
                        "the datacenter options do not tell the next-id range (Sys.Audit on / \
                         missing?); new VMIDs come from /cluster/nextid"
                    );
                }
                range
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the datacenter options; new VMIDs come from /cluster/nextid");
                None
            }
        };
        // A failed read is kept as long as a good one: a create never costs a second try.
        self.range = Some((Instant::now(), range));
        range
    }
}

/// Per cycle and site, where the search for a free id goes on. Within a cycle the taken ids
/// only grow (the listing is fixed, and an id handed out stays taken: created, or skipped
/// after `already exists`), so the lowest free id never goes down and each search starts
/// after the last id handed out.
#[derive(Default)]
pub(crate) struct CycleCursors(Mutex<HashMap<String, u32>>);

impl CycleCursors {
    /// The lowest id free in `range` at or past this cycle's cursor for `site`, which then
    /// moves past it.
    pub(crate) fn take(
        &self,
        site: &str,
        range: VmidRange,
        taken: impl Fn(u32) -> bool,
    ) -> Option<u32> {
        let mut cursors = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let from = cursors.get(site).copied().unwrap_or(range.lower);
        let id = lowest_free(range, from, taken)?;
        cursors.insert(site.to_string(), id + 1);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(v: serde_json::Value) -> DatacenterOptions {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_range_as_pve_answers_it() {
        let full = |next: serde_json::Value| {
            let mut o = json!({"mac_prefix": "BC:24:11", "allowed-tags": []});
            if !next.is_null() {
                o["next-id"] = next;
            }
            VmidRange::from_options(&options(o))
        };
        assert_eq!(full(json!(null)), Some(VmidRange::default()));
        assert_eq!(
            full(json!({"lower": "5000"})),
            Some(VmidRange {
                lower: 5000,
                upper: 1_000_000
            })
        );
        assert_eq!(
            full(json!({"lower": 200, "upper": 300})),
            Some(VmidRange {
                lower: 200,
                upper: 300
            })
        );
        assert_eq!(
            full(json!("lower=5000,upper=6000")),
            Some(VmidRange {
                lower: 5000,
                upper: 6000
            })
        );
        assert_eq!(
            full(json!({"upper": 1_000_000_000u64})),
            Some(VmidRange {
                lower: 100,
                upper: 1_000_000_000
            })
        );
        // Never outside PVE's VMIDs, whatever the answer says.
        assert_eq!(
            full(json!({"lower": 1, "upper": 5_000_000_000u64})),
            None,
            "an upper past u32 does not read"
        );
        assert_eq!(full(json!({"lower": 1})).unwrap().lower, 100);
        // Unreadable: not guessed.
        assert_eq!(full(json!({"lower": "x"})), None);
        assert_eq!(full(json!("lower")), None);
        assert_eq!(full(json!(7)), None);
        // Unknown keys are PVE's business.
        assert_eq!(full(json!({"other": 1})), Some(VmidRange::default()));
    }

    #[test]
    fn a_partial_answer_tells_no_range() {
        // Without Sys.Audit on `/`: console and tag-style only, never `next-id`.
        let o = options(json!({"console": "xtermjs", "allowed-tags": ["a"]}));
        assert_eq!(VmidRange::from_options(&o), None);
        // A `next-id` is believed even so.
        let o = options(json!({"next-id": {"lower": 700}}));
        assert_eq!(VmidRange::from_options(&o).unwrap().lower, 700);
    }

    #[test]
    fn the_lowest_gap_in_range() {
        let range = VmidRange {
            lower: 100,
            upper: 110,
        };
        let taken = [100, 101, 103, 9000];
        let free = |from| lowest_free(range, from, |id| taken.contains(&id));
        assert_eq!(free(0), Some(102));
        assert_eq!(free(103), Some(104));
        assert_eq!(free(109), Some(109));
        assert_eq!(free(110), None, "upper is exclusive");
        let all = |_| true;
        assert_eq!(lowest_free(range, 0, all), None);
        let empty = VmidRange {
            lower: 300,
            upper: 200,
        };
        assert_eq!(lowest_free(empty, 0, |_| false), None);
    }

    #[test]
    fn a_cycle_hands_out_each_id_once_per_site() {
        let cursors = CycleCursors::default();
        let range = VmidRange {
            lower: 5000,
            upper: 5004,
        };
        let listed = |id| id == 5001;
        assert_eq!(cursors.take("a", range, listed), Some(5000));
        assert_eq!(cursors.take("a", range, listed), Some(5002));
        // Another site has its own ids.
        assert_eq!(cursors.take("b", range, listed), Some(5000));
        assert_eq!(cursors.take("a", range, listed), Some(5003));
        assert_eq!(
            cursors.take("a", range, listed),
            None,
            "the range is used up"
        );
        // A wider range (read again) goes on past the cursor, never below the new lower.
        let wider = VmidRange {
            lower: 5000,
            upper: 6000,
        };
        assert_eq!(cursors.take("a", wider, listed), Some(5004));
        let higher = VmidRange {
            lower: 5500,
            upper: 6000,
        };
        assert_eq!(cursors.take("b", higher, listed), Some(5500));
    }
}
