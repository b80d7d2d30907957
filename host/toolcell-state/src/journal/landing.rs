//! What a journal knows of whole rewrites: a step taken before one, and the line that says its
//! new content is about to be put in place (and as which file), so that a replay restores only
//! what the call did change.

use super::*;

/// What a replay needs to know of a [`Step`] taken before a whole rewrite.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rewrite {
    /// The birth time of the file saved, where the file system keeps one. While the path is
    /// still that very file (the inode the step's `identity` names, born then: not a later
    /// file given the freed number), the new content never landed, and a replay leaves the
    /// path as it is, whatever its content (another program may have written it in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub born: Option<(i64, u32)>,
    /// Whether the new content may have been put in place: a `landing` line after the step
    /// names the path (or, in the call itself, it was about to land). A replay restores no
    /// rewrite step without it: the path is then as the call found it, or as another program
    /// made it since (a file renamed over it, or one made where the call was creating its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub landing: bool,
    /// The file the new content was put in place as (its device and inode, and its birth time
    /// where the file system keeps one), from the `landing` line. Where the path's newest step
    /// finds another file there, another program put it there since (having seen the call's
    /// content), and a replay leaves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed_as: Option<Landed>,
}

/// A file a call is about to put in place: its path, and which file it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Landed {
    /// Device and inode.
    pub inode: (u64, u64),
    /// Birth time, where the file system keeps one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub born: Option<(i64, u32)>,
}

/// Mark the rewrite steps of `files`' paths as landing, as those files.
pub(crate) fn mark_landing(steps: &mut [Step], files: &[(String, Landed)]) {
    for step in steps.iter_mut() {
        if let (Some(rewrite), Some((_, landed))) = (step.rewrite.as_mut(), files.iter().find(|(path, _)| *path == step.path)) {
            rewrite.landing = true;
            rewrite.landed_as = Some(*landed);
        }
    }
}

impl Journal {
    /// Record that the new content of these paths (rewritten whole) is about to be put in place
    /// as these files; on the disk with the next [`make_durable`](Self::make_durable).
    ///
    /// # Errors
    ///
    /// Whatever appending the line fails with; nothing must be put in place then.
    pub fn landing(&mut self, files: &[(String, Landed)]) -> std::io::Result<()> {
        self.file.append(&Line::Landing { call: self.call_id.clone(), files: files.to_vec() }, false)?;
        self.unsynced = true;
        self.landing_unrecorded(files);
        Ok(())
    }

    /// Note that the new content of `files` is about to be put in place, for this call's own
    /// rollback only: a call whose one change is one rename leaves nothing for a recovery to
    /// replay, whether the rename happened or not.
    pub fn landing_unrecorded(&mut self, files: &[(String, Landed)]) {
        mark_landing(&mut self.steps, files);
    }

    /// Drop the steps taken before rewrites whose new content was never about to land: the
    /// call did not change those paths, so neither its rollback nor its undo record touches
    /// them (another host may have written them meanwhile).
    pub fn drop_unlanded(&mut self) {
        self.steps.retain(|step| step.rewrite.as_ref().is_none_or(|rewrite| rewrite.landing));
    }
}
