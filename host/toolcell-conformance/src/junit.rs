//! The report as JUnit XML, the format CI systems (GitLab, Jenkins, GitHub's test reporters)
//! read: one `<testsuite>` for the component, one `<testcase>` per check (its group as the
//! class), a `<failure>` with the detail for each check that failed; warnings in the suite's
//! `<system-err>`.

use crate::Report;

impl Report {
    /// The report as JUnit XML.
    #[must_use]
    pub fn junit(&self) -> String {
        let failures = self.checks.iter().filter(|check| !check.passed).count();
        let suite = format!("toolcell conformance: {}", self.tool.as_deref().unwrap_or(&self.component));
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        xml.push_str(&format!(
            "<testsuites name=\"toolcell conformance\" tests=\"{}\" failures=\"{failures}\">\n  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\">\n",
            self.checks.len(),
            escape(&suite),
            self.checks.len()
        ));
        for check in &self.checks {
            let class = format!("{}.{}", self.tool.as_deref().unwrap_or("component"), check.group);
            let opening = format!("    <testcase classname=\"{}\" name=\"{}\"", escape(&class), escape(&check.name));
            if check.passed {
                xml.push_str(&format!("{opening}/>\n"));
            } else {
                let first = check.detail.lines().next().unwrap_or("failed");
                xml.push_str(&format!(
                    "{opening}>\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                    escape(first),
                    escape(&check.detail)
                ));
            }
        }
        if !self.warnings.is_empty() {
            let warnings: Vec<String> = self.warnings.iter().map(|warning| format!("warning: {warning}")).collect();
            xml.push_str(&format!("    <system-err>{}</system-err>\n", escape(&warnings.join("\n"))));
        }
        xml.push_str("  </testsuite>\n</testsuites>\n");
        xml
    }
}

/// `text` as XML character data or an attribute value: markup escaped, and characters XML 1.0
/// cannot hold (most control characters) replaced.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            '\n' => escaped.push_str("&#10;"),
            '\t' | '\r' => escaped.push(' '),
            character if character.is_control() => escaped.push('\u{fffd}'),
            character => escaped.push(character),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::escape;
    use crate::{Check, Report};

    #[test]
    fn text_is_escaped_for_xml() {
        for (text, expected) in [
            ("plain", "plain"),
            ("a < b && c > \"d\"", "a &lt; b &amp;&amp; c &gt; &quot;d&quot;"),
            ("it's\nbroken\u{0}", "it&apos;s&#10;broken\u{fffd}"),
        ] {
            assert_eq!(escape(text), expected, "{text:?}");
        }
    }

    #[test]
    fn each_check_is_a_testcase_and_each_failure_says_why() {
        let check =
            |name: &str, passed: bool, detail: &str| Check { group: "behaviour", name: name.to_owned(), passed, detail: detail.to_owned() };
        let report = Report {
            component: "t.wasm".to_owned(),
            tool: Some("t".to_owned()),
            checks: vec![check("reads", true, ""), check("stays <fast>", false, "took 9 s\nraise the deadline")],
            warnings: Vec::new(),
        };
        assert_eq!(
            report.junit(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"toolcell conformance\" tests=\"2\" failures=\"1\">\n  \
             <testsuite name=\"toolcell conformance: t\" tests=\"2\" failures=\"1\" errors=\"0\" skipped=\"0\">\n    \
             <testcase classname=\"t.behaviour\" name=\"reads\"/>\n    <testcase classname=\"t.behaviour\" name=\"stays &lt;fast&gt;\">\n      \
             <failure message=\"took 9 s\">took 9 s&#10;raise the deadline</failure>\n    </testcase>\n  </testsuite>\n</testsuites>\n"
        );
        let warned = Report { warnings: vec!["declares no <hosts>".to_owned()], ..report };
        assert!(
            warned.junit().contains("    <system-err>warning: declares no &lt;hosts&gt;</system-err>\n  </testsuite>"),
            "{}",
            warned.junit()
        );
    }
}
