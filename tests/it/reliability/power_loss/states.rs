//! The disk states a power cut may leave, built from a recorded log.
//!
//! The model is ALICE's. Inodes and directory entries are apart: a file's
//! creation, unlink and rename are operations on the directory, durable
//! only once an fsync of the directory that *began* after them has ended;
//! writes, truncates and fallocates of an inode are durable once an fsync
//! or fdatasync of that inode that began after them has ended. Everything
//! else may or may not have reached the disk: at a cut, a state is the
//! durable part plus a prefix of the pending directory operations, plus,
//! for each file, some of its pending writes — a prefix in log order, or a
//! random subset, each write whole or torn at 512-byte sectors (a sector is
//! written whole or not at all).
//!
//! Cut points are spread over the whole log, with more right after an
//! acknowledgement (a line in the `acks` file, recorded in order with the
//! I/O) and at the edges of each sync. Identical states are checked once.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use super::recorder::{Op, Rec};
use crate::support::Rng;

/// The markers file: a workload's acknowledgements, one line each.
pub const ACKS: &str = "acks";

const SECTOR: usize = 512;

/// Names that are no part of a state: the markers, and SQLite's `-shm`
/// (rebuilt from the WAL after a crash; the shim does not record it).
fn ignored(name: &str) -> bool {
    name == ACKS || name.ends_with("-shm")
}

/// How many states to build: cut points, and per cut and directory
/// variant, prefixes of the pending writes and random subsets of them.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub max_cuts: usize,
    pub prefixes: usize,
    pub subsets: usize,
}

/// The directory before the recording, all of it durable: (name, inode
/// number, content).
pub type Initial = Vec<(String, u64, Vec<u8>)>;

/// A state a power cut may leave: each file's name and content, and how
/// it was built (for failure messages).
pub struct State {
    pub files: BTreeMap<String, Vec<u8>>,
    pub how: String,
}

/// Where a state was cut: before record `pos` of `of`, after `markers`.
pub struct Cut<'a> {
    pub pos: usize,
    pub of: usize,
    pub markers: &'a [String],
}

/// A digest of a state's files: equal for equal states.
pub type Digest = (u64, u64);

/// What the log held and how many states came of it.
#[derive(Debug, Default)]
pub struct Stats {
    pub records: usize,
    pub cuts: usize,
    pub generated: usize,
    /// Distinct disk states.
    pub distinct: usize,
    /// Distinct (disk state, acknowledgements before the cut) pairs: what
    /// was checked. The same disk state later in the log, with more
    /// acknowledged, is checked again (a lost acknowledgement looks just
    /// like that: nothing new on disk, yet the caller was told).
    pub checked: usize,
    pub markers: usize,
    pub file_syncs: usize,
    pub dir_syncs: usize,
    /// Writes to the database file made after the WAL had frames: what
    /// checkpoints copy back.
    pub db_writes_after_wal: usize,
    /// WAL headers written: the first, then one per restart.
    pub wal_headers: usize,
    /// Processes that wrote the WAL.
    pub wal_writers: BTreeSet<u32>,
}

#[derive(Clone, Copy)]
enum DataOp {
    /// The write of record `.0`.
    Write(usize),
    Trunc(u64),
    Extend(u64),
}

struct Pending {
    pos: usize,
    op: DataOp,
}

struct Inode {
    name: String,
    ops: Vec<Pending>,
    /// `ops[..durable_upto]` are durable, and applied to `durable`.
    durable_upto: usize,
    durable: Vec<u8>,
}

enum DirOp {
    Create(String, usize),
    Unlink(String),
    Rename(String, String),
}

struct Model<'r> {
    recs: &'r [Rec],
    inodes: Vec<Inode>,
    ino_map: HashMap<u64, usize>,
    /// Every name as the processes saw it (all operations applied).
    view: BTreeMap<String, usize>,
    dir_ops: Vec<DirOp>,
    dir_durable_upto: usize,
    dir_durable: BTreeMap<String, usize>,
    /// Syncs begun: (pid, serial) → (directory?, inode, operations covered).
    syncs: HashMap<(u32, u64), (bool, usize, usize)>,
    markers: Vec<String>,
    wal_has_frames: bool,
    stats: Stats,
}

fn write_into(content: &mut Vec<u8>, off: usize, data: &[u8], mask: Option<&[bool]>) {
    let Some(mask) = mask else {
        if content.len() < off + data.len() {
            content.resize(off + data.len(), 0);
        }
        content[off..off + data.len()].copy_from_slice(data);
        return;
    };
    let first = off / SECTOR;
    for (j, keep) in mask.iter().enumerate() {
        if !keep {
            continue;
        }
        let s = (first + j) * SECTOR;
        let (a, b) = (s.max(off), (s + SECTOR).min(off + data.len()));
        if a >= b {
            continue;
        }
        if content.len() < b {
            content.resize(b, 0);
        }
        content[a..b].copy_from_slice(&data[a - off..b - off]);
    }
}

fn sectors(off: u64, len: usize) -> usize {
    let off = off as usize;
    (off + len - 1) / SECTOR - off / SECTOR + 1
}

impl<'r> Model<'r> {
    fn new(recs: &'r [Rec], initial: &Initial) -> Model<'r> {
        let mut m = Model {
            recs,
            inodes: Vec::new(),
            ino_map: HashMap::new(),
            view: BTreeMap::new(),
            dir_ops: Vec::new(),
            dir_durable_upto: 0,
            dir_durable: BTreeMap::new(),
            syncs: HashMap::new(),
            markers: Vec::new(),
            wal_has_frames: false,
            stats: Stats::default(),
        };
        for (name, ino, content) in initial {
            let id = m.new_inode(name);
            m.inodes[id].durable = content.clone();
            m.ino_map.insert(*ino, id);
            m.view.insert(name.clone(), id);
            if !ignored(name) {
                m.dir_durable.insert(name.clone(), id);
            }
        }
        m
    }

    fn new_inode(&mut self, name: &str) -> usize {
        self.inodes.push(Inode {
            name: name.to_string(),
            ops: Vec::new(),
            durable_upto: 0,
            durable: Vec::new(),
        });
        self.inodes.len() - 1
    }

    fn inode_of(&self, ino: u64, i: usize) -> usize {
        *self
            .ino_map
            .get(&ino)
            .unwrap_or_else(|| panic!("record {i}: inode {ino} was never opened in the recording"))
    }

    fn apply_op(&self, content: &mut Vec<u8>, op: DataOp, mask: Option<&[bool]>) {
        match op {
            DataOp::Write(r) => {
                let Op::Write { off, data, .. } = &self.recs[r].op else {
                    unreachable!()
                };
                write_into(content, *off as usize, data, mask);
            }
            DataOp::Trunc(size) => content.resize(size as usize, 0),
            DataOp::Extend(size) => {
                if content.len() < size as usize {
                    content.resize(size as usize, 0);
                }
            }
        }
    }

    fn make_durable(&mut self, id: usize, upto: usize) {
        let inode = &self.inodes[id];
        if upto <= inode.durable_upto {
            return;
        }
        let mut content = std::mem::take(&mut self.inodes[id].durable);
        for k in self.inodes[id].durable_upto..upto {
            let op = self.inodes[id].ops[k].op;
            self.apply_op(&mut content, op, None);
        }
        let inode = &mut self.inodes[id];
        inode.durable = content;
        inode.durable_upto = upto;
    }

    fn apply_dir(names: &mut BTreeMap<String, usize>, op: &DirOp) {
        match op {
            DirOp::Create(n, id) => {
                names.insert(n.clone(), *id);
            }
            DirOp::Unlink(n) => {
                names.remove(n);
            }
            DirOp::Rename(a, b) => {
                if let Some(id) = names.remove(a) {
                    names.insert(b.clone(), id);
                }
            }
        }
    }

    // Long: one arm per kind of record, each small.
    fn apply(&mut self, i: usize) {
        let recs = self.recs;
        let rec = &recs[i];
        match &rec.op {
            Op::Hello => {}
            Op::Open { name, ino, created } => {
                if *created {
                    let id = self.new_inode(name);
                    self.ino_map.insert(*ino, id);
                    self.view.insert(name.clone(), id);
                    if !ignored(name) {
                        self.dir_ops.push(DirOp::Create(name.clone(), id));
                    }
                } else {
                    let id = *self.view.get(name).unwrap_or_else(|| {
                        panic!("record {i}: {name} opened, but its creation was not recorded")
                    });
                    if let Some(&old) = self.ino_map.get(ino) {
                        assert_eq!(old, id, "record {i}: {name} is another inode than before");
                    }
                    self.ino_map.insert(*ino, id);
                }
            }
            Op::Write { ino, off, data } => {
                let id = self.inode_of(*ino, i);
                let name = self.inodes[id].name.clone();
                if name == ACKS {
                    let text = String::from_utf8_lossy(data);
                    self.markers.extend(text.lines().map(str::to_string));
                    self.stats.markers = self.markers.len();
                    return;
                }
                if name.ends_with("-wal") {
                    self.wal_has_frames = true;
                    self.stats.wal_writers.insert(rec.pid);
                    if *off == 0 && data.len() == 32 {
                        self.stats.wal_headers += 1;
                    }
                } else if self.wal_has_frames && !name.ends_with("-journal") {
                    self.stats.db_writes_after_wal += 1;
                }
                self.inodes[id].ops.push(Pending {
                    pos: i,
                    op: DataOp::Write(i),
                });
            }
            Op::Trunc { ino, size } => {
                let id = self.inode_of(*ino, i);
                self.inodes[id].ops.push(Pending {
                    pos: i,
                    op: DataOp::Trunc(*size),
                });
            }
            Op::Falloc {
                ino,
                mode,
                off,
                len,
            } => {
                let id = self.inode_of(*ino, i);
                match mode {
                    0 => self.inodes[id].ops.push(Pending {
                        pos: i,
                        op: DataOp::Extend(off + len),
                    }),
                    // FALLOC_FL_KEEP_SIZE: blocks reserved, content unchanged.
                    1 => {}
                    m => panic!("record {i}: fallocate mode {m} is not modelled"),
                }
            }
            Op::Unlink { name } => {
                self.view.remove(name);
                if !ignored(name) {
                    self.dir_ops.push(DirOp::Unlink(name.clone()));
                }
            }
            Op::Rename { from, to } => {
                assert_eq!(
                    ignored(from),
                    ignored(to),
                    "record {i}: rename {from} -> {to} is not modelled"
                );
                if let Some(id) = self.view.remove(from) {
                    self.view.insert(to.clone(), id);
                }
                if !ignored(from) {
                    self.dir_ops.push(DirOp::Rename(from.clone(), to.clone()));
                }
            }
            Op::SyncBegin { dir, ino, serial } => {
                let begun = if *dir {
                    Some((true, 0, self.dir_ops.len()))
                } else {
                    self.ino_map
                        .get(ino)
                        .map(|&id| (false, id, self.inodes[id].ops.len()))
                };
                if let Some(b) = begun {
                    self.syncs.insert((rec.pid, *serial), b);
                }
            }
            Op::SyncEnd { serial, ok, .. } => {
                let Some((dir, id, upto)) = self.syncs.remove(&(rec.pid, *serial)) else {
                    return;
                };
                if !ok {
                    return;
                }
                if dir {
                    self.stats.dir_syncs += 1;
                    if upto > self.dir_durable_upto {
                        for op in &self.dir_ops[self.dir_durable_upto..upto] {
                            Self::apply_dir(&mut self.dir_durable, op);
                        }
                        self.dir_durable_upto = upto;
                    }
                } else {
                    self.stats.file_syncs += 1;
                    self.make_durable(id, upto);
                }
            }
            Op::Unmodelled { what } => panic!("record {i}: {what}: not modelled"),
        }
    }

    /// The states a cut here may leave (not deduplicated).
    fn states(&self, rng: &mut Rng, budget: &Budget) -> Vec<State> {
        let pending_dir = &self.dir_ops[self.dir_durable_upto..];
        let m = pending_dir.len();
        let mut ks = vec![m];
        if m > 0 {
            ks.push(0);
            for _ in 0..2.min(m - 1) {
                ks.push(1 + rng.below(m as u64 - 1) as usize);
            }
        }
        ks.sort_unstable();
        ks.dedup();
        let mut out = Vec::new();
        for k in ks {
            let mut names = self.dir_durable.clone();
            for op in &pending_dir[..k] {
                Self::apply_dir(&mut names, op);
            }
            let files: Vec<(String, usize)> =
                names.into_iter().filter(|(n, _)| !ignored(n)).collect();
            self.content_states(&files, format!("dir {k}/{m}"), rng, budget, &mut out);
        }
        out
    }

    fn content_states(
        &self,
        files: &[(String, usize)],
        dir: String,
        rng: &mut Rng,
        budget: &Budget,
        out: &mut Vec<State>,
    ) {
        let pending: Vec<&[Pending]> = files
            .iter()
            .map(|(_, id)| &self.inodes[*id].ops[self.inodes[*id].durable_upto..])
            .collect();
        // Every pending op in log order: (pos, file, index in its file).
        let mut merged: Vec<(usize, usize, usize)> = pending
            .iter()
            .enumerate()
            .flat_map(|(f, ops)| ops.iter().enumerate().map(move |(j, p)| (p.pos, f, j)))
            .collect();
        merged.sort_unstable();
        let t = merged.len();
        // A plan: per file, the pending ops kept, each whole or torn.
        type Plan = Vec<Vec<(usize, Option<Vec<bool>>)>>;
        let none = || -> Plan { vec![Vec::new(); files.len()] };
        let mut plans: Vec<(String, Plan)> = vec![("durable only".into(), none())];
        if t > 0 {
            let mut all = none();
            for &(_, f, j) in &merged {
                all[f].push((j, None));
            }
            plans.push((format!("all {t} pending"), all));
        }
        for q in pick(1, t, budget.prefixes, rng) {
            let mut p = none();
            for &(_, f, j) in &merged[..q] {
                p[f].push((j, None));
            }
            plans.push((format!("first {q}/{t} pending in log order"), p));
        }
        if pending.iter().filter(|p| !p.is_empty()).count() > 1 {
            for (f, ops) in pending.iter().enumerate() {
                for q in pick(1, ops.len(), 2, rng) {
                    let mut p = none();
                    p[f] = (0..q).map(|j| (j, None)).collect();
                    plans.push((
                        format!("first {q}/{} of {} alone", ops.len(), files[f].0),
                        p,
                    ));
                }
            }
        }
        for s in 0..if t > 0 { budget.subsets } else { 0 } {
            let mut p = none();
            let mut kept = 0;
            let mut torn = 0;
            for &(_, f, j) in &merged {
                if rng.below(2) == 0 {
                    continue;
                }
                kept += 1;
                let mask = match pending[f][j].op {
                    DataOp::Write(r) => match &self.recs[r].op {
                        Op::Write { off, data, .. }
                            if sectors(*off, data.len()) > 1 && rng.below(3) == 0 =>
                        {
                            torn += 1;
                            Some(
                                (0..sectors(*off, data.len()))
                                    .map(|_| rng.below(2) == 0)
                                    .collect(),
                            )
                        }
                        _ => None,
                    },
                    _ => None,
                };
                p[f].push((j, mask));
            }
            plans.push((
                format!("random subset {s}: {kept}/{t} pending, {torn} torn"),
                p,
            ));
        }
        for (how, plan) in plans {
            let mut state = BTreeMap::new();
            for (f, (name, id)) in files.iter().enumerate() {
                let mut content = self.inodes[*id].durable.clone();
                for (j, mask) in &plan[f] {
                    self.apply_op(&mut content, pending[f][*j].op, mask.as_deref());
                }
                state.insert(name.clone(), content);
            }
            out.push(State {
                files: state,
                how: format!("{dir}, {how}"),
            });
        }
    }
}

/// Up to `n` distinct values in `from..to`, all of them when few.
fn pick(from: usize, to: usize, n: usize, rng: &mut Rng) -> Vec<usize> {
    if to <= from {
        return Vec::new();
    }
    if to - from <= n {
        return (from..to).collect();
    }
    let mut v: BTreeSet<usize> = BTreeSet::new();
    while v.len() < n {
        v.insert(from + rng.below((to - from) as u64) as usize);
    }
    v.into_iter().collect()
}

/// Up to `n` of `v`, drawn at random, in order.
fn sample(mut v: Vec<usize>, n: usize, rng: &mut Rng) -> Vec<usize> {
    v.sort_unstable();
    v.dedup();
    while v.len() > n {
        let i = rng.below(v.len() as u64) as usize;
        v.remove(i);
    }
    v
}

/// The cut points: right after acknowledgements, at both edges of each
/// sync's end, and evenly through the log; the first and last
/// acknowledgement and the end of the log always.
fn cut_points(recs: &[Rec], budget: &Budget, rng: &mut Rng) -> Vec<usize> {
    let acks: HashSet<u64> = recs
        .iter()
        .filter_map(|r| match &r.op {
            Op::Open { name, ino, .. } if name == ACKS => Some(*ino),
            _ => None,
        })
        .collect();
    let mut after_acks = Vec::new();
    let mut others = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        match &r.op {
            Op::Write { ino, .. } if acks.contains(ino) => after_acks.push(i + 1),
            Op::SyncEnd { .. } => others.extend([i, i + 1]),
            _ => {}
        }
    }
    let step = (recs.len() / budget.max_cuts.max(1)).max(1);
    others.extend((0..recs.len()).step_by(step));
    let mut cuts = vec![recs.len()];
    cuts.extend(after_acks.first().copied());
    cuts.extend(after_acks.last().copied());
    let half = budget.max_cuts / 2;
    cuts.extend(sample(after_acks, half, rng));
    cuts.extend(sample(others, budget.max_cuts - half, rng));
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

fn digest(files: &BTreeMap<String, Vec<u8>>) -> Digest {
    let mut a = DefaultHasher::new();
    let mut b = DefaultHasher::new();
    0xa5u8.hash(&mut b);
    for (name, content) in files {
        name.hash(&mut a);
        content.hash(&mut a);
        content.len().hash(&mut b);
        name.hash(&mut b);
        content.hash(&mut b);
    }
    (a.finish(), b.finish())
}

/// Builds the states of `recs` (the directory held `initial` before) and
/// hands each to `visit` with its cut and digest, once per disk state and
/// number of acknowledgements before the cut. Panics on a log the model
/// cannot follow.
pub fn build(
    recs: &[Rec],
    initial: &Initial,
    budget: &Budget,
    rng: &mut Rng,
    mut visit: impl FnMut(&Cut, &State, Digest),
) -> Stats {
    let cuts = cut_points(recs, budget, rng);
    let mut model = Model::new(recs, initial);
    let mut states = HashSet::new();
    let mut pairs = HashSet::new();
    let mut next = cuts.iter().peekable();
    let mut generated = 0;
    for p in 0..=recs.len() {
        if next.peek() == Some(&&p) {
            next.next();
            for st in model.states(rng, budget) {
                generated += 1;
                let d = digest(&st.files);
                states.insert(d);
                if pairs.insert((d, model.markers.len())) {
                    let cut = Cut {
                        pos: p,
                        of: recs.len(),
                        markers: &model.markers,
                    };
                    visit(&cut, &st, d);
                }
            }
        }
        if p < recs.len() {
            model.apply(p);
        }
    }
    let mut stats = model.stats;
    stats.records = recs.len();
    stats.cuts = cuts.len();
    stats.generated = generated;
    stats.distinct = states.len();
    stats.checked = pairs.len();
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(op: Op) -> Rec {
        Rec { pid: 1, tid: 1, op }
    }

    fn open(name: &str, ino: u64) -> Rec {
        rec(Op::Open {
            name: name.into(),
            ino,
            created: true,
        })
    }

    fn write(ino: u64, off: u64, byte: u8, len: usize) -> Rec {
        rec(Op::Write {
            ino,
            off,
            data: vec![byte; len],
        })
    }

    fn sync(dir: bool, ino: u64, serial: u64) -> [Rec; 2] {
        [
            rec(Op::SyncBegin { dir, ino, serial }),
            rec(Op::SyncEnd {
                dir,
                ino,
                serial,
                ok: true,
            }),
        ]
    }

    /// Every distinct state at the end of `recs`.
    fn final_states(recs: &[Rec]) -> Vec<BTreeMap<String, Vec<u8>>> {
        let budget = Budget {
            max_cuts: 0,
            prefixes: 8,
            subsets: 64,
        };
        let mut out = Vec::new();
        let n = recs.len();
        build(
            recs,
            &Vec::new(),
            &budget,
            &mut Rng::new(7),
            |cut, st, _| {
                if cut.pos == n {
                    out.push(st.files.clone());
                }
            },
        );
        out
    }

    it! {
        fn a_synced_file_whose_directory_was_never_synced_may_vanish() {
            let mut recs = vec![open("f", 1), write(1, 0, 7, 100)];
            recs.extend(sync(false, 1, 1));
            let states = final_states(&recs);
            assert!(states.iter().any(|s| !s.contains_key("f")));
            assert!(states.iter().any(|s| s.get("f") == Some(&vec![7; 100])));
            recs.extend(sync(true, 0, 2));
            let states = final_states(&recs);
            assert!(states.iter().all(|s| s.get("f") == Some(&vec![7; 100])));
        }
    }

    it! {
        fn a_sync_covers_only_the_writes_logged_before_it_began() {
            let mut recs = vec![open("f", 1)];
            recs.extend(sync(true, 0, 1));
            recs.push(write(1, 0, 1, 512));
            recs.push(rec(Op::SyncBegin {
                dir: false,
                ino: 1,
                serial: 2,
            }));
            recs.push(write(1, 512, 2, 512));
            recs.push(rec(Op::SyncEnd {
                dir: false,
                ino: 1,
                serial: 2,
                ok: true,
            }));
            let states = final_states(&recs);
            assert!(states.iter().all(|s| s["f"][..512] == [1; 512]));
            assert!(states.iter().any(|s| s["f"].len() == 512));
            assert!(states.iter().any(|s| s["f"].len() == 1024));
        }
    }

    it! {
        fn a_pending_write_may_be_torn_but_only_at_sector_boundaries() {
            let mut recs = vec![open("f", 1), write(1, 0, 0, 2048)];
            recs.extend(sync(false, 1, 1));
            recs.extend(sync(true, 0, 2));
            recs.push(write(1, 0, 9, 2048));
            let states = final_states(&recs);
            let mixed = states.iter().any(|s| {
                let f = &s["f"];
                f.contains(&0) && f.contains(&9)
            });
            assert!(mixed, "no torn write among {} states", states.len());
            for s in &states {
                for sector in s["f"].chunks(SECTOR) {
                    assert!(
                        sector.iter().all(|&b| b == sector[0]),
                        "a sector half written"
                    );
                }
            }
        }
    }

    it! {
        fn an_unlink_not_yet_synced_may_not_have_happened() {
            let mut recs = vec![open("f", 1), write(1, 0, 3, 10)];
            recs.extend(sync(false, 1, 1));
            recs.extend(sync(true, 0, 2));
            recs.push(rec(Op::Unlink { name: "f".into() }));
            let states = final_states(&recs);
            assert!(states.iter().any(|s| s.get("f") == Some(&vec![3; 10])));
            assert!(states.iter().any(|s| !s.contains_key("f")));
        }
    }
}
