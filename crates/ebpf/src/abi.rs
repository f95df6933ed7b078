//! The compiled BPF object and the Rust mirrors of the records it shares with user space. The
//! layouts must match `bpf/kepler.bpf.c`; the size assertions below catch a drift in width.

/// `bpf/kepler.bpf.o`, built by `make bpf` and committed so that `cargo build` needs no clang.
/// Aligned to 8 bytes because the ELF parser reads headers in place.
pub(crate) static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/kepler.bpf.o");

/// Totals of one thread group (`struct task_totals`): since the programs were loaded with
/// `sched_switch` accounting; with the task iterator, `cpu_ns` and `switches` are the last
/// pass's reading since the group's start, and `dead_*` its ended threads' part.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TaskTotals {
    /// The group leader's `start_boottime` in ns.
    pub start_ns: u64,
    pub cgroup_id: u64,
    pub cpu_ns: u64,
    pub switches: u64,
    pub page_cache_hits: u64,
    pub irq_net_tx: u64,
    pub irq_net_rx: u64,
    pub irq_block: u64,
    pub cycles: u64,
    pub instructions: u64,
    pub cache_misses: u64,
    /// Bit 0: kernel thread; bit 1: exited, left in the map because the exit ring was full.
    pub flags: u32,
    /// Iterator accounting: the pass that last wrote `cpu_ns` and `switches`.
    pub pass: u32,
    /// Iterator accounting: the final runtime and switches of the group's ended threads.
    pub dead_ns: u64,
    pub dead_switches: u64,
    /// Iterator accounting: the group's slot in `pass_out` during pass `pass`.
    pub slot: u32,
    pub _pad: u32,
    /// Iterator accounting: the last pass's reading on the kernel's own basis, what the
    /// group's released threads left in its `signal_struct` plus its live threads; it needs no
    /// final-switch program (see `kepler_iter`).
    pub sig_ns: u64,
    pub sig_switches: u64,
}

// SAFETY: plain integers, `repr(C)`, no padding left implicit.
unsafe impl aya::Pod for TaskTotals {}

impl TaskTotals {
    pub(crate) const KERNEL_THREAD: u32 = 1;
    pub(crate) const EXITED: u32 = 2;

    /// Adds another part of the same group's totals (a group can be handed over in pieces
    /// when its threads exit on several CPUs at once).
    pub(crate) fn add(&mut self, other: &TaskTotals) {
        self.cpu_ns = self.cpu_ns.saturating_add(other.cpu_ns);
        self.switches = self.switches.saturating_add(other.switches);
        self.page_cache_hits = self.page_cache_hits.saturating_add(other.page_cache_hits);
        self.irq_net_tx = self.irq_net_tx.saturating_add(other.irq_net_tx);
        self.irq_net_rx = self.irq_net_rx.saturating_add(other.irq_net_rx);
        self.irq_block = self.irq_block.saturating_add(other.irq_block);
        self.cycles = self.cycles.saturating_add(other.cycles);
        self.instructions = self.instructions.saturating_add(other.instructions);
        self.cache_misses = self.cache_misses.saturating_add(other.cache_misses);
        if other.cgroup_id != 0 {
            self.cgroup_id = other.cgroup_id;
        }
        self.flags |= other.flags;
        // Each piece carries the whole group's last reading on this basis, not a part of it.
        self.sig_ns = self.sig_ns.max(other.sig_ns);
        self.sig_switches = self.sig_switches.max(other.sig_switches);
    }

    /// The same totals with the kernel-basis reading (`sig_*`) as the reading.
    pub(crate) fn on_kernel_basis(&self) -> TaskTotals {
        TaskTotals {
            cpu_ns: self.sig_ns,
            switches: self.sig_switches,
            ..*self
        }
    }
}

/// One exited thread group, as written to the `exits` ring buffer (`struct exit_record`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ExitRecord {
    pub tgid: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
    /// Cgroup id in the cpu controller's hierarchy (a v1 one on hybrid hosts); 0 if unknown.
    pub cpu_cgroup_id: u64,
    pub totals: TaskTotals,
}

impl ExitRecord {
    /// Parses a ring-buffer item; `None` if it is shorter than a record (a kernel/user-space
    /// mismatch, never expected).
    pub(crate) fn parse(bytes: &[u8]) -> Option<ExitRecord> {
        if bytes.len() < std::mem::size_of::<ExitRecord>() {
            return None;
        }
        // SAFETY: the length was checked, every bit pattern is a valid `ExitRecord` (integers
        // only), and `read_unaligned` makes no alignment assumption about the ring buffer.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<ExitRecord>()) })
    }
}

/// A kernel command name (NUL-padded, not always UTF-8) as text, lossily decoded.
pub(crate) fn comm_text(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(comm.get(..end).unwrap_or_default()).into_owned()
}

/// What one task iterator pass read of a group (`struct pass_slot`), in the slot the pass gave
/// it in the mapped `pass_out` array.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PassSlot {
    pub tgid: u32,
    pub flags: u32,
    pub start_ns: u64,
    pub cgroup_id: u64,
    pub cpu_ns: u64,
    pub switches: u64,
    pub sig_ns: u64,
    pub sig_switches: u64,
}

// SAFETY: plain integers, `repr(C)`, no implicit padding.
unsafe impl aya::Pod for PassSlot {}

impl PassSlot {
    /// The reading as the process map's entry would give it after the pass.
    pub(crate) fn totals(&self) -> TaskTotals {
        TaskTotals {
            start_ns: self.start_ns,
            cgroup_id: self.cgroup_id,
            cpu_ns: self.cpu_ns,
            switches: self.switches,
            flags: self.flags,
            sig_ns: self.sig_ns,
            sig_switches: self.sig_switches,
            ..TaskTotals::default()
        }
    }
}

/// Which pass `pass_out`'s slots hold, and how many it gave (`struct pass_fill`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PassFill {
    pub pass: u32,
    pub used: u32,
}

// SAFETY: plain integers, `repr(C)`, no implicit padding.
unsafe impl aya::Pod for PassFill {}

/// One CPU's switch state (`struct cpu_state`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuState {
    /// CLOCK_MONOTONIC ns of the last switch on this CPU; 0 before the first one.
    pub last_ns: u64,
    pub cycles: u64,
    pub instructions: u64,
    pub cache_misses: u64,
    /// Group of the task switched in then (0: idle).
    pub cur_tgid: u32,
    pub _pad: u32,
    pub cur_start_ns: u64,
}

// SAFETY: plain integers, `repr(C)`, no implicit padding.
unsafe impl aya::Pod for CpuState {}

/// What a group's switches charged to its slot of the `slots` array since it took the slot
/// (`struct slot`), with per-switch accounting. The group's reading is its process-map entry
/// plus this.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Slot {
    /// The tgid of the group holding the slot; [`Slot::FREE`] or [`Slot::BUSY`] otherwise.
    pub owner: u64,
    /// The holder's group leader's `start_boottime`: with `owner`, which group it is.
    pub start_ns: u64,
    pub cpu_ns: u64,
    pub switches: u64,
    pub cycles: u64,
    pub instructions: u64,
    pub cache_misses: u64,
    pub _pad: u64,
}

// SAFETY: plain integers, `repr(C)`, no implicit padding.
unsafe impl aya::Pod for Slot {}

impl Slot {
    /// Held by no group.
    #[cfg(test)]
    pub(crate) const FREE: u64 = 0;
    /// Being taken or emptied by a CPU.
    #[cfg(test)]
    pub(crate) const BUSY: u64 = u64::MAX;

    /// Whether the slot is group (`tgid`, `start_ns`)'s.
    pub(crate) fn holds(&self, tgid: u32, start_ns: u64) -> bool {
        self.owner == u64::from(tgid) && self.start_ns == start_ns
    }
}

/// Indices of the `kstats` array.
pub(crate) mod kstat {
    pub const TASKS_FULL: u32 = 0;
    pub const EXITS_LOST: u32 = 1;
    pub const TGID_REUSED: u32 = 2;
    pub const EXITS_DEFERRED: u32 = 3;
    pub const PASS_OUT_FULL: u32 = 4;
}

/// Names in the object, kept in one place so the loader and the tests agree.
pub(crate) mod names {
    pub const SWITCH_PROG: &str = "kepler_switch";
    pub const SOFTIRQ_PROG: &str = "kepler_softirq";
    pub const PGCACHE_PROG: &str = "kepler_pgcache";
    pub const PGCACHE_FENTRY_PROG: &str = "kepler_pgcache_fentry";
    pub const ITER_PROG: &str = "kepler_iter";
    pub const EXIT_PROG: &str = "kepler_exit";
    pub const TASKS: &str = "tasks";
    pub const PASS_OUT: &str = "pass_out";
    pub const PASS_FILL: &str = "pass_fill";
    pub const EXITS: &str = "exits";
    pub const KSTATS: &str = "kstats";
    pub const CPU_STATE: &str = "cpu_state";
    pub const HW_CYCLES: &str = "hw_cycles";
    pub const HW_INSTR: &str = "hw_instr";
    pub const HW_CMISS: &str = "hw_cmiss";
    pub const HW_GLOBAL: &str = "hw_counters";
    pub const SLOTS: &str = "slots";
    pub const SLOT_MASK_GLOBAL: &str = "slot_mask";
}

const _: () = assert!(std::mem::size_of::<TaskTotals>() == 136);
const _: () = assert!(std::mem::size_of::<ExitRecord>() == 168);
const _: () = assert!(std::mem::size_of::<PassSlot>() == 56);
const _: () = assert!(std::mem::size_of::<CpuState>() == 48);
const _: () = assert!(std::mem::size_of::<Slot>() == 64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_is_an_aligned_bpf_elf() {
        assert_eq!(OBJECT.as_ptr() as usize % 8, 0);
        assert_eq!(OBJECT.get(..4), Some(&b"\x7fELF"[..]));
    }

    #[test]
    fn exit_record_parses_and_trims_comm() {
        let mut rec = ExitRecord {
            tgid: 42,
            ..Default::default()
        };
        rec.comm[..4].copy_from_slice(b"bash");
        rec.totals.cpu_ns = 7;
        // SAFETY: test-only view of a plain `repr(C)` value as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&rec as *const ExitRecord).cast::<u8>(),
                std::mem::size_of::<ExitRecord>(),
            )
        };
        let parsed = ExitRecord::parse(bytes).unwrap();
        assert_eq!(parsed, rec);
        assert_eq!(comm_text(&parsed.comm), "bash");
        let mut odd = [b'x'; 16];
        odd[0] = 0xff;
        assert_eq!(
            comm_text(&odd).chars().count(),
            16,
            "all 16 bytes, one replaced"
        );
        assert!(ExitRecord::parse(&bytes[..10]).is_none());
    }
}
