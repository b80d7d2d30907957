//! A task file's text: its `# Title`, its header of `**Field**: value` lines, and its body;
//! parsed, checked and rendered back.

use super::*;

/// The header fields every task file has.
pub const REQUIRED_FIELDS: [&str; 6] = ["Chain", "Task", "Status", "Type", "Created", "CR"];

/// A parsed task file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFile {
    /// The title, without the `# `.
    pub title: String,
    /// The header fields, in order.
    pub fields: Vec<(String, String)>,
    /// Everything after the header, as written.
    pub body: String,
}

impl TaskFile {
    /// Parse a task file.
    ///
    /// # Errors
    ///
    /// What is malformed: no `# ` title line, no header, a missing required field.
    pub fn parse(text: &str) -> Result<TaskFile, String> {
        let mut lines = text.lines().peekable();
        let title = loop {
            match lines.next() {
                None => return Err("it is empty: a task file starts with a `# Title` line".to_owned()),
                Some(line) if line.trim().is_empty() => {}
                Some(line) => match line.strip_prefix("# ") {
                    Some(title) if !title.trim().is_empty() => break title.trim().to_owned(),
                    _ => return Err("its first line is not a `# Title` line".to_owned()),
                },
            }
        };
        while lines.peek().is_some_and(|line| line.trim().is_empty()) {
            lines.next();
        }
        let mut fields = Vec::new();
        while let Some(line) = lines.peek() {
            let Some((name, value)) = header_field(line) else {
                break;
            };
            fields.push((name.to_owned(), value.to_owned()));
            lines.next();
        }
        let body: Vec<&str> = lines.collect();
        let file = TaskFile { title, fields, body: body.join("\n") };
        let missing: Vec<&str> = REQUIRED_FIELDS.into_iter().filter(|field| file.field(field).is_none()).collect();
        if !missing.is_empty() {
            return Err(format!(
                "its header lacks {}: a task file has `**Field**: value` lines for {} after its title",
                missing.iter().map(|field| format!("`**{field}**`")).collect::<Vec<_>>().join(", "),
                REQUIRED_FIELDS.join(", ")
            ));
        }
        Ok(file)
    }

    /// A header field's value.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(field, _)| field.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    /// Set a header field (appended if missing).
    pub fn set_field(&mut self, name: &str, value: &str) {
        match self.fields.iter_mut().find(|(field, _)| field.eq_ignore_ascii_case(name)) {
            Some((_, existing)) => *existing = value.to_owned(),
            None => self.fields.push((name.to_owned(), value.to_owned())),
        }
    }

    /// Remove a header field.
    pub fn remove_field(&mut self, name: &str) {
        self.fields.retain(|(field, _)| !field.eq_ignore_ascii_case(name));
    }

    /// Append a `## heading` section to the body.
    pub fn append_section(&mut self, heading: &str, text: &str) {
        let trimmed = self.body.trim_end().to_owned();
        self.body = format!("{trimmed}\n\n## {heading}\n\n{}\n", text.trim_end());
    }

    /// The acceptance criteria: every `- [ ]` / `- [x]` item, with whether it is checked.
    pub fn criteria(&self) -> Vec<(bool, String)> {
        self.body
            .lines()
            .filter_map(|line| {
                let line = line.trim_start();
                if let Some(text) = line.strip_prefix("- [ ] ") {
                    Some((false, text.trim().to_owned()))
                } else {
                    line.strip_prefix("- [x] ").or_else(|| line.strip_prefix("- [X] ")).map(|text| (true, text.trim().to_owned()))
                }
            })
            .collect()
    }

    /// Check the criteria numbered (from 1) in `numbers`.
    ///
    /// # Errors
    ///
    /// `invalid-args` for a number that is no criterion.
    pub fn check_criteria(&mut self, numbers: &[u32]) -> Result<(), ToolError> {
        let total = self.criteria().len();
        if let Some(bad) = numbers.iter().find(|number| **number == 0 || **number as usize > total) {
            return Err(ToolError::InvalidArgs(format!(
                "there is no acceptance criterion {bad}: the task has {total}, numbered from 1 (`task_status` lists them)"
            )));
        }
        let mut index = 0;
        let lines: Vec<String> = self
            .body
            .lines()
            .map(|line| {
                let indent = line.len() - line.trim_start().len();
                let rest = &line[indent..];
                let item = rest.starts_with("- [ ] ") || rest.starts_with("- [x] ") || rest.starts_with("- [X] ");
                if !item {
                    return line.to_owned();
                }
                index += 1;
                if numbers.contains(&(index as u32)) { format!("{}- [x] {}", &line[..indent], &rest[6..]) } else { line.to_owned() }
            })
            .collect();
        self.body = lines.join("\n");
        Ok(())
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut text = format!("# {}\n\n", self.title);
        for (name, value) in &self.fields {
            text.push_str(&format!("**{name}**: {value}\n"));
        }
        let body = self.body.trim_matches('\n');
        if !body.is_empty() {
            text.push('\n');
            text.push_str(body);
            text.push('\n');
        }
        text
    }

    /// Whether the task is an implementation task (`**Type**: impl`).
    pub fn is_impl(&self) -> bool {
        self.field("Type").is_some_and(|kind| kind.eq_ignore_ascii_case("impl"))
    }
}

fn header_field(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().strip_prefix("**")?;
    let (name, value) = rest.split_once("**:")?;
    if name.is_empty() || !name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' || byte == b' ') {
        return None;
    }
    Some((name, value.trim()))
}
