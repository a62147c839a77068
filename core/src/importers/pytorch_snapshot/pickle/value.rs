//! Values as the machine holds them: 8-byte tagged words ([`Val`]), and what code outside the
//! machine sees of one ([`V`]).

/// An 8-byte tagged value: 4 tag bits, 60 payload bits.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct Val(pub(super) u64);

pub(super) const T_NONE: u64 = 0;
pub(super) const T_BOOL: u64 = 1;
pub(super) const T_INT: u64 = 2;
pub(super) const T_WIDE: u64 = 3;
pub(super) const T_HUGE: u64 = 4;
pub(super) const T_FLOAT: u64 = 5;
pub(super) const T_STR: u64 = 6;
pub(super) const T_BYTES: u64 = 7;
pub(super) const T_OBJ: u64 = 8;
pub(super) const T_STACK: u64 = 9;
pub(super) const T_FRAME: u64 = 10;
pub(super) const T_CONSUMED: u64 = 11;
/// A list read flat ([`super::flat::ITEMS`]).
pub(super) const T_ITEMS: u64 = 12;
/// A trace entry lowered where it was read ([`Val::LOWERED_ENTRY`]).
pub(super) const T_LOWERED: u64 = 13;
pub(super) const T_UNSET: u64 = 15;

/// A decoded value, as seen by code outside the VM.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum V {
    None,
    Bool(bool),
    Int(i64),
    /// An integer outside the i64 range.
    Huge,
    Float(f64),
    Str(u32),
    Bytes(u32),
    Obj(u32),
    /// A frame list already interned as a stack id.
    Stack(u32),
    /// A frame dict already interned as a frame id.
    Frame(u32),
    /// A trace entry already turned into a table row (it cannot be used twice).
    Consumed,
}

impl Val {
    pub const NONE: Val = Val(T_NONE);
    /// What stands on the stack for a trace entry read flat and already lowered into a row of
    /// the list it will be appended to ([`super::flat`]): the append hook takes it as consumed.
    pub const LOWERED_ENTRY: Val = Val(T_LOWERED);
    pub(super) const UNSET: Val = Val(T_UNSET);
    #[inline]
    pub(super) fn tag(self) -> u64 {
        self.0 & 0xF
    }
    #[inline]
    pub(super) fn idx(self) -> u32 {
        (self.0 >> 4) as u32
    }
    #[inline]
    pub(super) fn with(tag: u64, idx: u32) -> Val {
        Val(((idx as u64) << 4) | tag)
    }
    #[inline]
    pub fn bool(b: bool) -> Val {
        Val(((b as u64) << 4) | T_BOOL)
    }
    pub fn stack(id: u32) -> Val {
        Val::with(T_STACK, id)
    }
    pub fn frame(id: u32) -> Val {
        Val::with(T_FRAME, id)
    }
    /// The interned string `id`.
    pub fn string(id: u32) -> Val {
        Val::with(T_STR, id)
    }
    pub fn consumed() -> Val {
        Val(T_CONSUMED)
    }
    #[inline]
    pub(super) fn obj(self) -> Option<u32> {
        (self.tag() == T_OBJ).then(|| self.idx())
    }
}
