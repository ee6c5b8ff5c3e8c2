//! Writing a batch to the JSONL folder store: which file each event goes to, appends,
//! `fsync`, and the cut back after a failed write (see [`super`]).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Inner, MAX_OPEN};
use crate::audit::AuditError;
use crate::audit::store::{Incoming, IngestOutcome, agent_dir_name, decide};

impl Inner {
    /// The file an event goes to: the first segment of its day that is writable and holds no
    /// later event of its run (`planned`: what this batch already puts where).
    fn target(&mut self, inc: &Incoming, planned: &HashMap<(u32, String, String), u64>) -> u32 {
        let base = agent_dir_name(&inc.agent_id);
        let day = inc.ts.format("%Y-%m-%d").to_string();
        let run = self.run_id(&inc.agent_id, &inc.run_id);
        for k in 0u32.. {
            let name = match k {
                0 => format!("{day}.jsonl"),
                k => format!("{day}.{k}.jsonl"),
            };
            let id = self.file_id(&Path::new(&base).join(name));
            if self.files.get(id as usize).is_some_and(|f| f.poisoned) {
                continue;
            }
            let stored = run.and_then(|r| self.file_run_max.get(&(id, r)).copied());
            let batch = planned
                .get(&(id, inc.agent_id.clone(), inc.run_id.clone()))
                .copied();
            if stored.max(batch).is_none_or(|m| m < inc.seq) {
                return id;
            }
        }
        0
    }

    fn handle(&mut self, file: u32) -> Result<&mut File, AuditError> {
        if !self.open.contains_key(&file) {
            if self.open.len() >= MAX_OPEN {
                self.open.clear();
            }
            let rel = self
                .files
                .get(file as usize)
                .map(|f| f.rel.clone())
                .unwrap_or_default();
            let path = self.dir.join(&rel);
            if let Some(parent) = path.parent()
                && !parent.is_dir()
            {
                std::fs::create_dir_all(parent).map_err(|e| AuditError::io(parent, e))?;
                sync_dir(&self.dir)?;
            }
            let existed = path.exists();
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| AuditError::io(&path, e))?;
            if !existed && let Some(parent) = path.parent() {
                sync_dir(parent)?;
            }
            let len = f.metadata().map_err(|e| AuditError::io(&path, e))?.len();
            if let Some(rec) = self.files.get_mut(file as usize)
                && rec.len != len
            {
                // Only a crash of an earlier write can leave more than the good part.
                f.set_len(rec.len.min(len))
                    .map_err(|e| AuditError::io(&path, e))?;
            }
            self.open.insert(file, f);
        }
        self.open
            .get_mut(&file)
            .ok_or_else(|| AuditError::Sink("collector: file handle vanished".into()))
    }

    /// Writes `bytes` at the end of `file` and fsyncs it.
    fn append(&mut self, file: u32, bytes: &[u8]) -> Result<(), AuditError> {
        let path = self.path_of(file);
        let f = self.handle(file)?;
        f.write_all(bytes)
            .and_then(|_| f.sync_data())
            .map_err(|e| AuditError::io(&path, e))
    }

    /// Cuts `file` back to `len` after a failed batch; a file that cannot be cut back is
    /// poisoned (never written again by this process).
    fn roll_back(&mut self, file: u32, len: u64) {
        let path = self.path_of(file);
        let cut = self.handle(file).and_then(|f| {
            f.set_len(len)
                .and_then(|_| f.sync_data())
                .map_err(|e| AuditError::io(&path, e))
        });
        if let Err(e) = cut {
            tracing::error!(
                "cannot cut {} back after a failed write: {e}; using a new segment",
                path.display()
            );
            if let Some(f) = self.files.get_mut(file as usize) {
                f.poisoned = true;
            }
        }
        self.open.remove(&file);
    }

    pub(super) fn path_of(&self, file: u32) -> PathBuf {
        self.files
            .get(file as usize)
            .map(|f| self.dir.join(&f.rel))
            .unwrap_or_else(|| self.dir.clone())
    }

    pub(super) fn ingest(&mut self, batch: Vec<Incoming>) -> Result<IngestOutcome, AuditError> {
        let plan = decide(batch, self);
        let mut outcome = IngestOutcome {
            accepted: 0,
            duplicates: plan.duplicates,
            rejected: plan.rejected,
        };
        if plan.accept.is_empty() {
            return Ok(outcome);
        }
        // Place every event, then write one buffer per file.
        let mut planned: HashMap<(u32, String, String), u64> = HashMap::new();
        let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
        for (i, inc) in plan.accept.iter().enumerate() {
            let file = self.target(inc, &planned);
            planned.insert((file, inc.agent_id.clone(), inc.run_id.clone()), inc.seq);
            match groups.iter_mut().find(|(f, _)| *f == file) {
                Some((_, v)) => v.push(i),
                None => groups.push((file, vec![i])),
            }
        }
        let mut written: Vec<(u32, u64)> = Vec::with_capacity(groups.len());
        for (file, idxs) in &groups {
            let mut buf =
                Vec::with_capacity(idxs.iter().map(|i| plan.accept[*i].line.len() + 1).sum());
            for i in idxs {
                buf.extend_from_slice(plan.accept[*i].line.as_bytes());
                buf.push(b'\n');
            }
            let start = self.files.get(*file as usize).map_or(0, |f| f.len);
            written.push((*file, start));
            if let Err(e) = self.append(*file, &buf) {
                for (f, len) in written.into_iter().rev() {
                    self.roll_back(f, len);
                }
                return Err(e);
            }
            if let Some(f) = self.files.get_mut(*file as usize) {
                f.len = start + buf.len() as u64;
            }
        }
        for (file, idxs) in &groups {
            let mut offset = written
                .iter()
                .find(|(f, _)| f == file)
                .map_or(0, |(_, s)| *s);
            for i in idxs {
                let inc = &plan.accept[*i];
                self.index(inc, *file, offset);
                offset += inc.line.len() as u64 + 1;
            }
        }
        outcome.accepted = plan.accept.len();
        Ok(outcome)
    }
}

fn sync_dir(dir: &Path) -> Result<(), AuditError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| AuditError::io(dir, e))
}
