//! A one-trie checkpoint paged into a [`NodeStore`] while it is streamed and checked
//! ([`page_in`]): the trie of a paged forest, in memory bounded by one node path per part.

use super::error::{CheckpointError, CpResult};
use super::format::{RawNode, SUBTRIE_COUNT};
use super::stream::{stream_checked, PartSink, StreamInfo, Walk};
use crate::flow::hash::Hash;
use crate::flow::mtrie::Trie;
use crate::flow::node::Node;
use crate::flow::node_store::{NodeStore, NodeWriter};
use crate::flow::OutputError;
use std::collections::HashMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

/// Builds a one-trie checkpoint's trie into `store` while it is streamed and checked: each
/// part's nodes are written to a node file of their own as they are read (on the part's
/// thread), then the top part's nodes above them. Returns what was read and the trie, whose
/// root is a placeholder: memory stays at one node path per part, whatever the checkpoint's
/// size. Nothing of the store is referenced unless every CRC, node and root checked out.
pub fn page_in(
    dir: &FsPath,
    name: &str,
    walk: Walk,
    store: &Arc<NodeStore>,
) -> CpResult<(StreamInfo, Trie)> {
    let s = stream_checked(dir, name, walk, |_, file| PagingSink::new(store, file))?;
    // A part's subtrie root is its last node.
    let mut placed: HashMap<u64, Arc<Node>> = HashMap::new();
    for (i, root) in s.sinks.into_iter().enumerate() {
        if let Some(root) = root {
            placed.insert(s.starts[i + 1] - 1, root);
        }
    }
    let total = s.starts[SUBTRIE_COUNT] - 1;
    let mut w = store.writer().map_err(CheckpointError::from)?;
    let mut top: Vec<Arc<Node>> = Vec::with_capacity(s.top.nodes.len());
    let child = |top: &Vec<Arc<Node>>, g: u64, at: u64| -> CpResult<Option<Arc<Node>>> {
        if g == 0 {
            return Ok(None);
        }
        let found = if g <= total {
            placed.get(&g).cloned()
        } else {
            top.get((g - total - 1) as usize).cloned()
        };
        found.map(Some).ok_or_else(|| {
            CheckpointError::new(
                &s.top.file,
                at,
                "bad_child_index",
                format!("node index {g}"),
            )
        })
    };
    for n in &s.top.nodes {
        let placeholder = match &n.raw {
            RawNode::Leaf { height, hash, reg } => {
                w.leaf(*height, *hash, reg).map_err(CheckpointError::from)?
            }
            RawNode::Interior {
                height,
                hash,
                left,
                right,
            } => {
                let l = child(&top, *left, n.at + 35)?;
                let r = child(&top, *right, n.at + 43)?;
                w.interior(*height, *hash, l.as_ref(), r.as_ref())
                    .map_err(CheckpointError::from)?
            }
        };
        top.push(placeholder);
    }
    w.flush().map_err(CheckpointError::from)?;
    let record = s
        .top
        .tries
        .last()
        .ok_or_else(|| CheckpointError::no_tries(&dir.join(name)))?;
    let trie = Trie {
        root: child(&top, record.root_index, record.at)?,
        reg_count: record.reg_count,
        reg_size: record.reg_size,
    };
    Ok((s.info, trie))
}

/// [`page_in`]'s sink: writes the part's nodes to a node file as they are read, keeping the
/// placeholders of the completed subtrees not yet under a parent (at most one per level).
struct PagingSink {
    writer: NodeWriter,
    file: PathBuf,
    stack: Vec<Arc<Node>>,
}

impl PagingSink {
    fn new(store: &Arc<NodeStore>, file: &FsPath) -> CpResult<Self> {
        let writer = store
            .writer()
            .map_err(|e| CheckpointError::new(&e.file, e.offset, "io", e.message))?;
        Ok(PagingSink {
            writer,
            file: file.to_path_buf(),
            stack: Vec::new(),
        })
    }
}

impl PartSink for PagingSink {
    type Done = Option<Arc<Node>>;

    fn leaves(&mut self, _leaves: &[Arc<Node>], _: Option<&[Hash]>) -> Result<(), OutputError> {
        Ok(())
    }

    fn leaf_read(&mut self, leaf: &Arc<Node>) -> Result<(), OutputError> {
        let Node::Leaf { height, reg, hash } = &**leaf else {
            return Err(OutputError::Unexpected("a leaf expected"));
        };
        let p = self.writer.leaf(*height, *hash, reg)?;
        self.stack.push(p);
        Ok(())
    }

    fn interior(
        &mut self,
        height: u16,
        hash: &Hash,
        children: [bool; 2],
    ) -> Result<(), OutputError> {
        // The walk checked that the children are the subtrees just completed, right on top.
        let mut pop = |present: bool| -> Result<Option<Arc<Node>>, OutputError> {
            if !present {
                return Ok(None);
            }
            self.stack
                .pop()
                .map(Some)
                .ok_or_else(|| OutputError::Corrupt {
                    path: self.file.clone(),
                    what: "interior node without its subtree",
                })
        };
        let r = pop(children[1])?;
        let l = pop(children[0])?;
        let p = self
            .writer
            .interior(height, *hash, l.as_ref(), r.as_ref())?;
        self.stack.push(p);
        Ok(())
    }

    fn finish(mut self) -> Result<Self::Done, OutputError> {
        self.writer.flush()?;
        Ok(self.stack.pop())
    }
}
