//! A device as the CUDA back end holds it: its compiled modules, its memory cut into slots
//! (each with its stream and lists, one piece in flight), the pool that hands slots out and
//! halves them after an out-of-memory, and the bound on the two-limb walk's dropped carries
//! (split from `mod.rs`).

use super::*;

/// The functions of one compiled module.
pub(super) struct Module {
    pub(super) phase1: CudaFunction,
    pub(super) phase1_top: CudaFunction,
    pub(super) phase1_exact: CudaFunction,
    /// Phase 1 of a screened piece (docs/error-analysis.md §16): exact walk, two-limb walk,
    /// and the undecided domains of the latter.
    pub(super) phase1_quad: CudaFunction,
    pub(super) phase1_top_quad: CudaFunction,
    pub(super) phase1_exact_quad: CudaFunction,
    pub(super) phase1_words: CudaFunction,
    pub(super) phase2: CudaFunction,
    pub(super) phase3: CudaFunction,
    /// The progression route's dense pieces (`walk.rs`): every piece, and the narrowed ones
    /// alone at three times the resident warps.
    pub(super) dense_walk: CudaFunction,
    pub(super) narrow_walk: CudaFunction,
    pub(super) mul: CudaFunction,
    pub(super) div: CudaFunction,
    pub(super) words: CudaFunction,
    pub(super) binomial: CudaFunction,
    pub(super) tests: CudaFunction,
}

/// Bytes of list memory a device's slots hold now, and the most they held: what `search`
/// and `bench` report as the peak device memory of the lists.
#[derive(Debug, Default)]
pub(super) struct Gauge {
    pub(super) held: AtomicU64,
    pub(super) peak: AtomicU64,
}

impl Gauge {
    pub(super) fn add(&self, bytes: u64) {
        let now = self.held.fetch_add(bytes, Ordering::SeqCst) + bytes;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }

    pub(super) fn sub(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::SeqCst);
    }
}

/// One piece in flight on a device: its stream, its share of the budget and its lists, kept
/// from piece to piece (allocations are rare, and never larger than the shares).
pub(super) struct Slot {
    pub(super) stream: Arc<CudaStream>,
    pub(super) shares: Shares,
    pub(super) index: Option<CudaSlice<u64>>,
    pub(super) work: Option<CudaSlice<u64>>,
    pub(super) candidates: Option<CudaSlice<u64>>,
    pub(super) counters: CudaSlice<u64>,
    /// The domains the two-limb walk could not decide (`tmd_phase1_top`), `EXACT_CAP` entries.
    pub(super) exact: CudaSlice<u64>,
    /// A floor under the two-limb walk's slack: the self-test raises it so that many domains
    /// take the exact path and its overflow; 0 otherwise.
    pub(super) slack_floor: u64,
    pub(super) gauge: Arc<Gauge>,
}

/// Entries of a slot's list of domains that the two-limb walk leaves to exact words: about
/// `slack / 2^64` of the domains go there (one per binary64 unit of 2^25 domains); a range with
/// more runs again with the exact walk.
pub(super) const EXACT_CAP: u64 = 4096;

/// The most the two-limb walk may drop over a packet: above it the exact walk runs.
pub(super) const MAX_SLACK: u64 = 1 << 60;

/// A bound on what the two-limb walk of a table of `n` differences drops from the top 128 bits
/// of its lowest difference over `steps` steps: each step adds the upper difference's own
/// shortfall and at most one lost carry (`D_l += D_(l+1) + 1`, the highest difference exact).
/// `None` when it exceeds `MAX_SLACK`.
pub fn walk_slack(n: usize, steps: u64) -> Option<u64> {
    let mut d = vec![0u128; n];
    for _ in 0..steps {
        for l in 0..n.saturating_sub(1) {
            d[l] = d[l].saturating_add(d[l + 1]).saturating_add(1);
        }
        if d.first().is_some_and(|&x| x > MAX_SLACK as u128) {
            return None;
        }
    }
    Some(d.first().copied().unwrap_or(0) as u64)
}

impl Slot {
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        bytes: u64,
        gauge: Arc<Gauge>,
    ) -> Result<Slot, CudaError> {
        let stream = ctx.new_stream()?;
        let counters = stream.alloc_zeros::<u64>(8)?;
        let exact = stream.alloc_zeros::<u64>(EXACT_CAP as usize)?;
        Ok(Slot {
            stream,
            shares: Shares::of(bytes),
            index: None,
            work: None,
            candidates: None,
            counters,
            exact,
            slack_floor: 0,
            gauge,
        })
    }

    /// Drops the lists and takes the shares of `bytes` (after an out-of-memory, or when the
    /// device's slots were made smaller).
    pub(super) fn resize(&mut self, bytes: u64) {
        for list in [&mut self.index, &mut self.work, &mut self.candidates] {
            if let Some(l) = list.take() {
                self.gauge.sub(l.len() as u64 * memory::WORD_BYTES);
            }
        }
        self.shares = Shares::of(bytes);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.resize(0);
    }
}

/// Makes `list` hold at least `needed` entries (at most `share`), keeping it when it does.
pub(super) fn ensure(
    stream: &Arc<CudaStream>,
    gauge: &Gauge,
    list: &mut Option<CudaSlice<u64>>,
    needed: u64,
    share: u64,
) -> Result<(), CudaError> {
    let have = list.as_ref().map_or(0, |l| l.len() as u64);
    if have >= needed {
        return Ok(());
    }
    let len = grow_to(have, needed, share);
    // The old list goes first: never both at once.
    if let Some(old) = list.take() {
        gauge.sub(old.len() as u64 * memory::WORD_BYTES);
    }
    let new = stream.alloc_zeros::<u64>(len as usize)?;
    gauge.add(len * memory::WORD_BYTES);
    *list = Some(new);
    Ok(())
}

/// A device's slots: at most `count`, made on first use, handed to one piece at a time.
pub(super) struct Pool {
    pub(super) idle: Mutex<(Vec<Slot>, u64)>,
    pub(super) ready: Condvar,
    pub(super) count: u64,
    /// Bytes per slot now: halved on every out-of-memory or `Cuda::shrink`.
    pub(super) slot_bytes: AtomicU64,
}

/// A slot taken from a pool; goes back on drop.
pub(super) struct Taken<'a> {
    pub(super) pool: &'a Pool,
    pub(super) slot: Option<Slot>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.slot.take() {
            let mut idle = self.pool.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.0.push(s);
            self.pool.ready.notify_one();
        }
    }
}

impl Pool {
    pub(super) fn take<'a>(
        &'a self,
        ctx: &Arc<CudaContext>,
        gauge: &Arc<Gauge>,
    ) -> Result<Taken<'a>, CudaError> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let bytes = self.slot_bytes.load(Ordering::SeqCst);
            if let Some(mut s) = idle.0.pop() {
                if s.shares.bytes() > bytes {
                    s.resize(bytes);
                }
                return Ok(Taken {
                    pool: self,
                    slot: Some(s),
                });
            }
            if idle.1 < self.count {
                idle.1 += 1;
                drop(idle);
                return match Slot::new(ctx, bytes, gauge.clone()) {
                    Ok(s) => Ok(Taken {
                        pool: self,
                        slot: Some(s),
                    }),
                    Err(e) => {
                        self.idle.lock().unwrap_or_else(|e| e.into_inner()).1 -= 1;
                        Err(e)
                    }
                };
            }
            idle = self.ready.wait(idle).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Halves the slots below `from` bytes; `false` when that would go below the minimum.
    /// Whether a piece would get a slot now without waiting.
    pub(super) fn has_free(&self) -> bool {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        !idle.0.is_empty() || idle.1 < self.count
    }

    pub(super) fn shrink(&self, from: u64) -> bool {
        let half = from / 2;
        if half < MIN_SLOT_BYTES {
            return false;
        }
        self.slot_bytes.fetch_min(half, Ordering::SeqCst);
        true
    }
}

/// What a device's memory budget is and what its lists used.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceMemory {
    pub device: usize,
    pub name: String,
    /// The device's free and total memory when the back end opened it.
    pub free_at_open: u64,
    pub total: u64,
    pub budget: u64,
    pub slots: u64,
    /// Bytes per slot now (smaller than `budget / slots` after an out-of-memory).
    pub slot_bytes: u64,
    /// The most bytes the lists of all slots held at once.
    pub peak: u64,
}

/// A module of a device, made once: its lock is held while it compiles.
type ModuleCell = Arc<Mutex<Option<Arc<Module>>>>;

/// One GPU: its context, its architecture, its modules (compiled on first use) and its slots.
pub(super) struct Device {
    pub(super) ordinal: usize,
    pub(super) name: String,
    /// `sm_XY`, the real architecture its modules are compiled for.
    pub(super) arch: String,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) modules: Mutex<HashMap<(usize, usize), ModuleCell>>,
    pub(super) free_at_open: u64,
    pub(super) total: u64,
    pub(super) budget: u64,
    pub(super) pool: Pool,
    pub(super) gauge: Arc<Gauge>,
    pub(super) health: Health,
}

impl Device {
    pub(super) fn open(ordinal: usize, budget: MemoryBudget) -> Result<Device, CudaError> {
        let count = CudaContext::device_count()? as usize;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal)?;
        let (major, minor) = ctx.compute_capability()?;
        let (free, total) = ctx.mem_get_info()?;
        let (free, total) = (free as u64, total as u64);
        let mut bytes = budget.resolve(free);
        // Never plan on more than is free: the lists would fail to grow at the worst moment.
        let most = free / 10 * 9;
        if bytes > most {
            tracing::warn!(
                device = ordinal,
                asked = %human_bytes(bytes),
                free = %human_bytes(free),
                "the GPU memory budget is more than the device has free; using 90% of the free memory"
            );
            bytes = most;
        }
        let (slots, slot_bytes) = slots_for(bytes).ok_or(CudaError::BudgetTooSmall {
            device: ordinal,
            budget: bytes,
            free,
            total,
        })?;
        Ok(Device {
            ordinal,
            name: ctx.name()?,
            arch: format!("sm_{major}{minor}"),
            ctx,
            modules: Mutex::new(HashMap::new()),
            free_at_open: free,
            total,
            budget: bytes,
            pool: Pool {
                idle: Mutex::new((Vec::new(), 0)),
                ready: Condvar::new(),
                count: slots,
                slot_bytes: AtomicU64::new(slot_bytes),
            },
            gauge: Arc::new(Gauge::default()),
            health: Health::default(),
        })
    }

    pub(super) fn module(&self, limbs: usize, degree: usize) -> Result<Arc<Module>, CudaError> {
        // The map's lock only finds the module's own, which is held while it compiles: two
        // threads never compile the same module twice, and different modules compile at once.
        let cell = self
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((limbs, degree))
            .or_default()
            .clone();
        let mut cell = cell.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = cell.as_ref() {
            return Ok(m.clone());
        }
        let m = Arc::new(self.build_module(limbs, degree)?);
        *cell = Some(m.clone());
        Ok(m)
    }

    /// Compiles (or takes from the disk cache) and loads the modules of `keys` (limbs,
    /// degree), on the engine's threads at once: NVRTC runs on the host's cores, and one module
    /// after another made most of a fresh machine's start.
    pub(super) fn prepare(&self, keys: &[(usize, usize)]) -> Result<(), CudaError> {
        use rayon::prelude::*;
        keys.par_iter()
            .try_for_each(|&(limbs, degree)| self.module(limbs, degree).map(drop))
    }

    pub(super) fn build_module(&self, limbs: usize, degree: usize) -> Result<Module, CudaError> {
        let t = Instant::now();
        let compiled = compile(limbs, degree, &self.arch)?;
        let (cached, compile_ms) = (compiled.cached, t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let module = match self.ctx.load_module(Ptx::from_binary(compiled.image)) {
            // A cached image the driver refuses (a driver update, a cache copied from another
            // machine) is compiled again, never a reason to refuse the device.
            Err(e) if cached => {
                tracing::warn!(device = self.ordinal, limbs, degree, error = %e, "the driver refused a cached kernel module; compiling it again");
                let fresh = recompile(limbs, degree, &self.arch)?;
                self.ctx.load_module(Ptx::from_binary(fresh.image))?
            }
            other => other?,
        };
        tracing::info!(
            device = self.ordinal,
            limbs,
            degree,
            cached,
            compile_ms,
            load_ms = t.elapsed().as_secs_f64() * 1e3,
            "kernel module ready"
        );
        Ok(Module {
            phase1: module.load_function("tmd_phase1")?,
            phase1_top: module.load_function("tmd_phase1_top")?,
            phase1_exact: module.load_function("tmd_phase1_exact")?,
            phase1_quad: module.load_function("tmd_phase1_quad")?,
            phase1_top_quad: module.load_function("tmd_phase1_top_quad")?,
            phase1_exact_quad: module.load_function("tmd_phase1_exact_quad")?,
            phase1_words: module.load_function("tmd_phase1_words")?,
            phase2: module.load_function("tmd_phase2")?,
            phase3: module.load_function("tmd_phase3")?,
            dense_walk: module.load_function("tmd_dense_walk")?,
            narrow_walk: module.load_function("tmd_narrow_walk")?,
            mul: module.load_function("tmd_selftest_mul")?,
            div: module.load_function("tmd_selftest_div")?,
            words: module.load_function("tmd_selftest_words")?,
            binomial: module.load_function("tmd_selftest_binomial")?,
            tests: module.load_function("tmd_selftest_tests")?,
        })
    }
}
