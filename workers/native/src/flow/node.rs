//! The trie's node and register types (spec §4.1): what the MTrie ([`super::mtrie`]) links
//! into tries, the node store ([`super::node_store`]) pages out and back, and checkpoints read
//! and write. A paged-out node ([`Node::Paged`]) keeps a handle on its store to load itself
//! from, through the [`NodeSource`] trait the store implements (its location and error types are
//! in [`super::paging`]), which is what lets a paged forest walk its tries as if they were in
//! memory.

use super::hash::{default_hash, hash_inter, Hash, Path};
use super::paging::{Loc, StoreResult};
use super::record::PayloadRef;
use std::sync::Arc;

/// A register as leaves hold it, shared by every leaf node that holds it (a leaf is re-made at
/// another height as its neighbours change): path, encoded key and value in one allocation,
/// `path (32) | key length (u32 LE) | key | value`. One allocation instead of a struct and two
/// boxes saves about 50 heap bytes a register, and registers are a third of a replayed
/// forest's heap. Keeping the path here, not in the node, makes a node 56 bytes instead of 80:
/// interior nodes are most of a forest's nodes.
#[repr(transparent)]
pub struct Register([u8]);

const REG_KEY_AT: usize = 32;
const REG_HEAD: usize = REG_KEY_AT + 4;

impl Register {
    pub fn new(path: Path, payload: PayloadRef<'_>) -> Arc<Register> {
        let (key, value) = (payload.key, payload.value);
        // Every format rechain reads gives a key a u32 length.
        let key_len = u32::try_from(key.len()).expect("a key of at most 4 GiB");
        let mut bytes = Arc::<[u8]>::new_uninit_slice(REG_HEAD + key.len() + value.len());
        let buf = Arc::get_mut(&mut bytes).expect("a new Arc is unique");
        let parts: [&[u8]; 4] = [&path.0, &key_len.to_le_bytes(), key, value];
        let mut at = 0;
        for part in parts {
            for (slot, b) in buf[at..at + part.len()].iter_mut().zip(part) {
                slot.write(*b);
            }
            at += part.len();
        }
        // SAFETY: every byte was written above.
        let bytes: Arc<[u8]> = unsafe { bytes.assume_init() };
        // SAFETY: `Register` is `repr(transparent)` over `[u8]`, so the pointer's layout and
        // metadata are the same.
        unsafe { Arc::from_raw(Arc::into_raw(bytes) as *const Register) }
    }

    /// The bytes of the allocation holding a register of this key and value: the `Arc`'s
    /// two counts and the register.
    pub const fn arc_bytes(key_len: usize, value_len: usize) -> usize {
        2 * std::mem::size_of::<usize>() + REG_HEAD + key_len + value_len
    }

    pub fn path(&self) -> &Path {
        let bytes: &[u8; 32] = self.0[..REG_KEY_AT]
            .try_into()
            .expect("a register has a path");
        // SAFETY: `Path` is `repr(transparent)` over `[u8; 32]`.
        unsafe { &*(bytes as *const [u8; 32] as *const Path) }
    }

    fn key_len(&self) -> usize {
        let len: [u8; 4] = self.0[REG_KEY_AT..REG_HEAD]
            .try_into()
            .expect("a key length");
        u32::from_le_bytes(len) as usize
    }

    pub fn key(&self) -> &[u8] {
        &self.0[REG_HEAD..REG_HEAD + self.key_len()]
    }

    pub fn value(&self) -> &[u8] {
        &self.0[REG_HEAD + self.key_len()..]
    }

    pub fn payload(&self) -> PayloadRef<'_> {
        let (key, value) = self.0[REG_HEAD..].split_at(self.key_len());
        PayloadRef { key, value }
    }
}

impl std::fmt::Debug for Register {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = super::to_hex;
        let (path, key, value) = (self.path().to_hex(), hex(self.key()), hex(self.value()));
        write!(f, "Register({path}, key={key}, value={value})")
    }
}

/// A trie node. Leaves may sit at any height ("compact" leaves); interior nodes have at least
/// one child.
#[derive(Debug)]
pub enum Node {
    Leaf {
        height: u16,
        reg: Arc<Register>,
        hash: Hash,
    },
    Interior {
        height: u16,
        left: Option<Arc<Node>>,
        right: Option<Arc<Node>>,
        hash: Hash,
    },
    /// A node written to a [`NodeStore`] and not in memory: what a parent needs of it (height,
    /// hash, kind) and where to load it from ([`Node::resolve`]).
    Paged {
        height: u16,
        leaf: bool,
        hash: Hash,
        loc: Loc,
        store: Arc<dyn NodeSource>,
    },
}

/// Where a paged-out node loads itself from: the node store ([`super::node_store::NodeStore`]
/// implements it), reached through this trait so that nodes need nothing of the store.
pub trait NodeSource: Send + Sync + std::fmt::Debug {
    /// The node written at `loc` (cached by the store).
    fn load_node(self: Arc<Self>, loc: Loc) -> StoreResult<Arc<Node>>;
    /// As [`Self::load_node`], for a walk that reads each node once (not cached).
    fn load_node_once(self: Arc<Self>, loc: Loc) -> StoreResult<Arc<Node>>;
}

impl Node {
    pub fn hash(&self) -> Hash {
        match self {
            Node::Leaf { hash, .. } | Node::Interior { hash, .. } | Node::Paged { hash, .. } => {
                *hash
            }
        }
    }

    pub fn height(&self) -> u16 {
        match self {
            Node::Leaf { height, .. }
            | Node::Interior { height, .. }
            | Node::Paged { height, .. } => *height,
        }
    }

    /// Whether this is a leaf, in memory or paged out.
    pub fn is_leaf(&self) -> bool {
        match self {
            Node::Leaf { .. } => true,
            Node::Interior { .. } => false,
            Node::Paged { leaf, .. } => *leaf,
        }
    }

    /// A leaf's register; None for an interior node (or a node not in memory).
    pub fn register(&self) -> Option<&Arc<Register>> {
        match self {
            Node::Leaf { reg, .. } => Some(reg),
            Node::Interior { .. } | Node::Paged { .. } => None,
        }
    }

    /// The node itself, loaded from its store if it is paged out: always a `Leaf` or an
    /// `Interior` (whose children may be placeholders).
    pub fn resolve(self: &Arc<Node>) -> StoreResult<Arc<Node>> {
        match &**self {
            Node::Paged { loc, store, .. } => store.clone().load_node(*loc),
            _ => Ok(self.clone()),
        }
    }

    /// As [`Self::resolve`], for a walk that reads each node once (the node is not cached).
    pub fn resolve_once(self: &Arc<Node>) -> StoreResult<Arc<Node>> {
        match &**self {
            Node::Paged { loc, store, .. } => store.clone().load_node_once(*loc),
            _ => Ok(self.clone()),
        }
    }

    /// The identity flow-go de-duplicates shared nodes by: the store location of a paged node
    /// (every placeholder of it), the address of a node in memory.
    pub fn identity(self: &Arc<Node>) -> (bool, u64) {
        match &**self {
            Node::Paged { loc, .. } => (true, *loc),
            _ => (false, Arc::as_ptr(self) as usize as u64),
        }
    }

    pub(super) fn interior(
        height: u16,
        left: Option<Arc<Node>>,
        right: Option<Arc<Node>>,
    ) -> Arc<Node> {
        let d = default_hash(height.saturating_sub(1));
        let hl = left.as_ref().map_or(d, |n| n.hash());
        let hr = right.as_ref().map_or(d, |n| n.hash());
        Arc::new(Node::Interior {
            height,
            left,
            right,
            hash: hash_inter(&hl, &hr),
        })
    }
}
