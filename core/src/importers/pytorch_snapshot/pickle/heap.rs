//! The arena the machine builds containers in ([`Heap`]): reference-counted containers, the
//! strings and the values too wide for a tagged word, charged against a memory budget.

use super::interner::Interner;
use super::memo::Memo;
use super::value::*;
use super::{PResult, PickleError, PickleLimits};

/// Container kinds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    List,
    /// Items are stored as alternating key, value.
    Dict,
    Tuple,
    Set,
    Free,
}

/// A container in the arena.
#[derive(Debug)]
pub struct Obj {
    pub kind: Kind,
    pub items: Vec<Val>,
    pub(super) rc: u32,
    pub(super) memo_slot: u32,
    pub(super) depth: u32,
    /// A compact stand-in computed by the hook (stack id, frame id), used when the container dies.
    pub lowered: Val,
    /// Rows of the trace table that were appended to this list instead of items.
    pub rows: Option<(u32, u32)>,
}

pub(super) const NO_SLOT: u32 = u32::MAX;
pub(super) const MANY_SLOTS: u32 = u32::MAX - 1;

/// Everything the VM built: the arena, interned strings and side tables for wide values.
pub struct Heap {
    pub objs: Vec<Obj>,
    pub(super) free: Vec<u32>,
    pub strings: Interner,
    pub(super) wide: Vec<i64>,
    pub(super) floats: Vec<f64>,
    pub(super) bytes: Vec<Box<[u8]>>,
    pub(super) mem: usize,
    pub(super) budget: usize,
    pub(super) max_depth: u32,
    /// Container items ever stored: the yardstick for how far a walk over them may expand.
    pub items_created: u64,
    /// Item vectors of freed containers, emptied, for the next containers made: a trace entry
    /// dict is made and freed millions of times, and the allocator was a sixth of decoding.
    pub(super) spare: Vec<Vec<Val>>,
    /// The work list of [`Heap::decref`], kept between calls.
    pub(super) dying: Vec<u32>,
}

/// Most emptied item vectors kept for reuse, and the largest capacity kept.
pub(super) const SPARE_VECS: usize = 4096;
pub(super) const SPARE_CAPACITY: usize = 1024;

impl Heap {
    pub(super) fn new(limits: &PickleLimits) -> Heap {
        Heap {
            objs: Vec::new(),
            free: Vec::new(),
            strings: Interner::default(),
            wide: Vec::new(),
            floats: Vec::new(),
            bytes: Vec::new(),
            mem: 0,
            budget: limits.memory_budget,
            max_depth: limits.max_depth,
            items_created: 0,
            spare: Vec::new(),
            dying: Vec::new(),
        }
    }

    /// An empty item vector, reused from a freed container when there is one.
    pub(super) fn items_vec(&mut self) -> Vec<Val> {
        self.spare.pop().unwrap_or_default()
    }

    /// A new container holding a copy of `items`.
    pub(super) fn new_obj_from(&mut self, kind: Kind, items: &[Val], offset: u64) -> PResult<Val> {
        let mut v = self.items_vec();
        v.extend_from_slice(items);
        self.new_obj(kind, v, offset)
    }

    /// Looks a value up.
    #[inline]
    pub fn get(&self, v: Val) -> V {
        match v.tag() {
            T_NONE => V::None,
            T_BOOL => V::Bool(v.idx() != 0),
            T_INT => V::Int((v.0 as i64) >> 4),
            T_WIDE => V::Int(self.wide[v.idx() as usize]),
            T_HUGE => V::Huge,
            T_FLOAT => V::Float(self.floats[v.idx() as usize]),
            T_STR => V::Str(v.idx()),
            T_BYTES => V::Bytes(v.idx()),
            T_OBJ => V::Obj(v.idx()),
            T_STACK => V::Stack(v.idx()),
            T_FRAME => V::Frame(v.idx()),
            T_CONSUMED => V::Consumed,
            _ => V::None,
        }
    }

    /// The frame id `v` stands for when its frame is interned already: a frame, or a frame dict
    /// lowered to one (what nearly every frame of a trace entry is).
    #[inline]
    pub fn interned_frame(&self, v: Val) -> Option<u32> {
        match v.tag() {
            T_FRAME => Some(v.idx()),
            T_OBJ => {
                let lowered = self.objs.get(v.idx() as usize)?.lowered;
                (lowered.tag() == T_FRAME).then(|| lowered.idx())
            }
            _ => None,
        }
    }

    pub fn str_of(&self, v: Val) -> Option<&str> {
        match self.get(v) {
            V::Str(id) => Some(self.strings.get(id)),
            _ => None,
        }
    }

    pub fn int_of(&self, v: Val) -> Option<i64> {
        match self.get(v) {
            V::Int(i) => Some(i),
            V::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    pub fn float_of(&self, v: Val) -> Option<f64> {
        match self.get(v) {
            V::Float(f) => Some(f),
            V::Int(i) => Some(i as f64),
            _ => None,
        }
    }

    /// The value under `key` (an interned string id) in dict `obj`; the last one wins.
    pub fn dict_get(&self, obj: u32, key: u32) -> Option<Val> {
        let o = &self.objs[obj as usize];
        if o.kind != Kind::Dict {
            return None;
        }
        o.items
            .chunks_exact(2)
            .rev()
            .find(|kv| kv[0] == Val::with(T_STR, key))
            .map(|kv| kv[1])
    }

    /// Items of a list, tuple or set (empty for anything else).
    pub fn seq(&self, obj: u32) -> &[Val] {
        let o = &self.objs[obj as usize];
        match o.kind {
            Kind::List | Kind::Tuple | Kind::Set => &o.items,
            _ => &[],
        }
    }

    pub fn kind(&self, obj: u32) -> Kind {
        self.objs[obj as usize].kind
    }

    pub(super) fn int(&mut self, i: i64) -> Val {
        if (i << 4) >> 4 == i {
            Val(((i as u64) << 4) | T_INT)
        } else {
            self.wide.push(i);
            Val::with(T_WIDE, (self.wide.len() - 1) as u32)
        }
    }

    pub(super) fn charge(&mut self, n: usize, offset: u64) -> PResult<()> {
        self.mem += n;
        if self.mem > self.budget {
            return Err(PickleError::MemoryBudget {
                offset,
                limit: self.budget,
            });
        }
        Ok(())
    }

    pub(super) fn new_obj(&mut self, kind: Kind, items: Vec<Val>, offset: u64) -> PResult<Val> {
        self.charge(64 + items.len() * 8, offset)?;
        self.items_created += items.len() as u64;
        let obj = Obj {
            kind,
            items,
            rc: 1,
            memo_slot: NO_SLOT,
            depth: 0,
            lowered: Val::UNSET,
            rows: None,
        };
        let idx = if let Some(i) = self.free.pop() {
            self.objs[i as usize] = obj;
            i
        } else {
            self.objs.push(obj);
            (self.objs.len() - 1) as u32
        };
        // Children moved in (tuple, frozenset) keep their counts; record depth.
        let mut depth = 0;
        for v in &self.objs[idx as usize].items {
            if let Some(c) = v.obj() {
                depth = depth.max(self.objs[c as usize].depth + 1);
            }
        }
        self.set_depth(idx, depth, offset)?;
        Ok(Val::with(T_OBJ, idx))
    }

    pub(super) fn set_depth(&mut self, idx: u32, depth: u32, offset: u64) -> PResult<()> {
        if depth > self.max_depth {
            return Err(PickleError::TooDeep {
                offset,
                limit: self.max_depth,
            });
        }
        let o = &mut self.objs[idx as usize];
        o.depth = o.depth.max(depth);
        Ok(())
    }

    /// Moves `v` into container `idx` (the reference moves, counts are unchanged).
    pub(super) fn push_item(&mut self, idx: u32, v: Val, offset: u64) -> PResult<()> {
        if let Some(c) = v.obj() {
            let d = self.objs[c as usize].depth + 1;
            self.set_depth(idx, d, offset)?;
        }
        self.charge(8, offset)?;
        self.items_created += 1;
        self.objs[idx as usize].items.push(v);
        Ok(())
    }

    #[inline]
    pub(super) fn incref(&mut self, v: Val) {
        if let Some(i) = v.obj() {
            self.objs[i as usize].rc += 1;
        }
    }

    /// Drops one reference; dead containers are freed (iteratively), memoized ones are
    /// replaced in the memo by their compact stand-in when they have one, kept otherwise.
    #[inline]
    pub(super) fn decref(&mut self, v: Val, memo: &mut Memo) {
        // Most values let go of are no container (a trace entry read flat, a number, a
        // string): no call for those.
        if let Some(i) = v.obj() {
            self.decref_obj(i, memo);
        }
    }

    /// [`Heap::decref`] of container `i`.
    #[inline(never)]
    fn decref_obj(&mut self, i: u32, memo: &mut Memo) {
        let mut work = std::mem::take(&mut self.dying);
        work.push(i);
        while let Some(i) = work.pop() {
            let o = &mut self.objs[i as usize];
            o.rc = o.rc.saturating_sub(1);
            if o.rc > 0 || o.kind == Kind::Free {
                continue;
            }
            let (memo_slot, lowered) = (o.memo_slot, o.lowered);
            match memo_slot {
                NO_SLOT => {}
                MANY_SLOTS => continue,
                slot => {
                    if lowered == Val::UNSET {
                        continue; // still reachable through the memo, keep it
                    }
                    self.mem += memo.stand_in(slot as usize, lowered);
                }
            }
            let o = &mut self.objs[i as usize];
            let mut items = std::mem::take(&mut o.items);
            o.kind = Kind::Free;
            self.mem = self.mem.saturating_sub(64 + items.len() * 8);
            work.extend(items.iter().filter_map(|v| v.obj()));
            self.free.push(i);
            if self.spare.len() < SPARE_VECS && items.capacity() <= SPARE_CAPACITY {
                items.clear();
                self.spare.push(items);
            }
        }
        self.dying = work;
    }
}
