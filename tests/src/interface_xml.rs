//! The interface XML files (`dbus/*.xml`, the source of truth of both services' bus API): read
//! with their `<doc:doc>` documentation, merged with what a running service introspects, written
//! back in one canonical form, and rendered as the API reference page (`docs/dbus-api.md`).
//!
//! The golden test (`tests/tests/interface_xml.rs`) compares each file with
//! [`render_xml`] of [`merge`]`(live, file)`: the structure (members, argument names, types,
//! directions, property access) comes from the service, the documentation from the file.
//! Annotations are neither compared nor written.

use std::fmt::Write as _;

/// The namespace of `<doc:doc>` (freedesktop's introspection documentation, as fwupd uses it).
pub const DOC_NS: &str = "http://www.freedesktop.org/dbus/1.0/doc.dtd";

/// Lines of the canonical XML and of the reference page are wrapped at this width.
const WIDTH: usize = 100;

/// What a member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Method,
    Signal,
    Property,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Method => "method",
            Kind::Signal => "signal",
            Kind::Property => "property",
        }
    }

    fn from_tag(tag: &str) -> Option<Kind> {
        match tag {
            "method" => Some(Kind::Method),
            "signal" => Some(Kind::Signal),
            "property" => Some(Kind::Property),
            _ => None,
        }
    }
}

/// One argument of a method or signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    pub name: String,
    pub signature: String,
    /// `in` or `out` for a method's argument (an implicit direction is `in`); `None` for a signal's.
    pub direction: Option<String>,
    /// The `<doc:summary>`, whitespace collapsed; empty when undocumented.
    pub summary: String,
}

/// A method, signal or property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub kind: Kind,
    pub name: String,
    pub args: Vec<Arg>,
    /// A property's type and access; empty for methods and signals.
    pub signature: String,
    pub access: String,
    /// The `<doc:para>`s of its `<doc:description>`, whitespace collapsed.
    pub doc: Vec<String>,
}

impl Member {
    /// Everything but the documentation, for comparing with introspection.
    pub fn shape(&self) -> String {
        let mut out = format!("{} {}", self.kind.tag(), self.name);
        if self.kind == Kind::Property {
            let _ = write!(out, " {} {}", self.signature, self.access);
        }
        for arg in &self.args {
            let _ = write!(
                out,
                " [{} {} {}]",
                arg.name,
                arg.signature,
                arg.direction.as_deref().unwrap_or("-")
            );
        }
        out
    }
}

/// One interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub doc: Vec<String>,
    pub members: Vec<Member>,
}

impl Interface {
    /// The members' shapes, sorted: what introspection must match.
    pub fn shape(&self) -> Vec<String> {
        let mut out: Vec<String> = self.members.iter().map(Member::shape).collect();
        out.sort();
        out
    }
}

/// An interface file: the text before `<node` (doctype, header comment) and its interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub preamble: String,
    pub interfaces: Vec<Interface>,
}

impl Document {
    pub fn interface(&self, name: &str) -> Option<&Interface> {
        self.interfaces.iter().find(|i| i.name == name)
    }

    /// Members (and interfaces) without a description, as `interface.Member` names.
    pub fn undocumented(&self) -> Vec<String> {
        let mut out = Vec::new();
        for iface in &self.interfaces {
            if iface.doc.is_empty() {
                out.push(iface.name.clone());
            }
            for member in &iface.members {
                if member.doc.is_empty() {
                    out.push(format!("{}.{}", iface.name, member.name));
                }
            }
        }
        out
    }
}

/// The shape of `interface` in `xml` (an interface file or an introspection reply): its
/// members with their arguments, types, directions and access, sorted; a panic when the XML is
/// unreadable or lacks the interface (for tests comparing a running service with its file).
pub fn shape_of(xml: &str, interface: &str) -> Vec<String> {
    let doc = parse(xml).unwrap_or_else(|e| panic!("{e}"));
    doc.interface(interface)
        .unwrap_or_else(|| panic!("{interface} missing"))
        .shape()
}

/// Why a document could not be read.
#[derive(Debug)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads an interface file or an introspection reply.
pub fn parse(xml: &str) -> Result<Document, ParseError> {
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let tree = roxmltree::Document::parse_with_options(xml, options)
        .map_err(|e| ParseError(format!("not XML: {e}")))?;
    let root = tree.root_element();
    if root.tag_name().name() != "node" {
        return Err(ParseError("the root element is not <node>".into()));
    }
    let preamble = xml
        .find("<node")
        .map(|at| xml[..at].to_owned())
        .unwrap_or_default();
    let mut interfaces = Vec::new();
    for node in root.children().filter(|n| is(n, "interface")) {
        interfaces.push(interface(node)?);
    }
    Ok(Document {
        preamble,
        interfaces,
    })
}

fn is(node: &roxmltree::Node<'_, '_>, name: &str) -> bool {
    node.is_element() && node.tag_name().name() == name && node.tag_name().namespace().is_none()
}

fn attr(node: &roxmltree::Node<'_, '_>, name: &str) -> Result<String, ParseError> {
    node.attribute(name).map(str::to_owned).ok_or_else(|| {
        ParseError(format!(
            "<{}> at byte {} has no {name}",
            node.tag_name().name(),
            node.range().start
        ))
    })
}

fn interface(node: roxmltree::Node<'_, '_>) -> Result<Interface, ParseError> {
    let mut members = Vec::new();
    for child in node.children().filter(|n| n.is_element()) {
        let Some(kind) = Kind::from_tag(child.tag_name().name()) else {
            continue;
        };
        if child.tag_name().namespace().is_some() {
            continue;
        }
        members.push(member(kind, child)?);
    }
    Ok(Interface {
        name: attr(&node, "name")?,
        doc: paragraphs(node),
        members,
    })
}

fn member(kind: Kind, node: roxmltree::Node<'_, '_>) -> Result<Member, ParseError> {
    let mut args = Vec::new();
    for arg in node.children().filter(|n| is(n, "arg")) {
        let direction = match kind {
            Kind::Method => Some(arg.attribute("direction").unwrap_or("in").to_owned()),
            _ => None,
        };
        args.push(Arg {
            // An unnamed argument (zbus's default for a return value) has the empty name.
            name: arg.attribute("name").unwrap_or_default().to_owned(),
            signature: attr(&arg, "type")?,
            direction,
            summary: doc_texts(arg, "summary").join(" "),
        });
    }
    let (signature, access) = match kind {
        Kind::Property => (attr(&node, "type")?, attr(&node, "access")?),
        _ => (String::new(), String::new()),
    };
    Ok(Member {
        kind,
        name: attr(&node, "name")?,
        args,
        signature,
        access,
        doc: paragraphs(node),
    })
}

fn paragraphs(node: roxmltree::Node<'_, '_>) -> Vec<String> {
    doc_texts(node, "para")
}

/// The texts of `<doc:doc>`'s descendants named `leaf`, whitespace collapsed.
fn doc_texts(node: roxmltree::Node<'_, '_>, leaf: &str) -> Vec<String> {
    let Some(doc) = node
        .children()
        .find(|n| n.is_element() && n.tag_name().namespace() == Some(DOC_NS))
    else {
        return Vec::new();
    };
    doc.descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == leaf)
        .map(|n| {
            let text: String = n
                .descendants()
                .filter(|t| t.is_text())
                .filter_map(|t| t.text())
                .collect();
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .filter(|t| !t.is_empty())
        .collect()
}

/// `live`'s structure with `documented`'s documentation: members in the file's order, then the
/// ones only the service has (in the service's order); arguments in the service's order.
pub fn merge(live: &Interface, documented: Option<&Interface>) -> Interface {
    let key = |m: &Member| (m.kind, m.name.clone());
    let mut members = Vec::new();
    let mut taken = vec![false; live.members.len()];
    if let Some(doc) = documented {
        for wanted in &doc.members {
            if let Some(i) = live.members.iter().position(|m| key(m) == key(wanted)) {
                taken[i] = true;
                members.push(document(&live.members[i], Some(wanted)));
            }
        }
    }
    for (i, member) in live.members.iter().enumerate() {
        if !taken[i] {
            members.push(document(member, None));
        }
    }
    Interface {
        name: live.name.clone(),
        doc: documented.map(|d| d.doc.clone()).unwrap_or_default(),
        members,
    }
}

fn document(live: &Member, documented: Option<&Member>) -> Member {
    let mut out = live.clone();
    out.doc = documented.map(|d| d.doc.clone()).unwrap_or_default();
    for arg in &mut out.args {
        arg.summary = documented
            .and_then(|d| d.args.iter().find(|a| a.name == arg.name))
            .map(|a| a.summary.clone())
            .unwrap_or_default();
    }
    out
}

/// The canonical text of an interface file.
pub fn render_xml(doc: &Document) -> String {
    let mut out = doc.preamble.clone();
    let _ = writeln!(out, "<node xmlns:doc=\"{DOC_NS}\">");
    for (i, iface) in doc.interfaces.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "  <interface name=\"{}\">", escape(&iface.name));
        description(&mut out, 4, &iface.doc);
        for member in &iface.members {
            out.push('\n');
            member_xml(&mut out, member);
        }
        out.push_str("  </interface>\n");
    }
    out.push_str("</node>\n");
    out
}

fn member_xml(out: &mut String, member: &Member) {
    let tag = member.kind.tag();
    let mut open = format!("    <{tag} name=\"{}\"", escape(&member.name));
    if member.kind == Kind::Property {
        let _ = write!(
            open,
            " type=\"{}\" access=\"{}\"",
            escape(&member.signature),
            escape(&member.access)
        );
    }
    if member.doc.is_empty() && member.args.is_empty() {
        let _ = writeln!(out, "{open}/>");
        return;
    }
    let _ = writeln!(out, "{open}>");
    description(out, 6, &member.doc);
    for arg in &member.args {
        let mut line = format!(
            "      <arg name=\"{}\" type=\"{}\"",
            escape(&arg.name),
            escape(&arg.signature)
        );
        if let Some(direction) = &arg.direction {
            let _ = write!(line, " direction=\"{}\"", escape(direction));
        }
        if arg.summary.is_empty() {
            let _ = writeln!(out, "{line}/>");
            continue;
        }
        let _ = writeln!(out, "{line}>");
        let one_line = format!(
            "        <doc:doc><doc:summary>{}</doc:summary></doc:doc>",
            escape(&arg.summary)
        );
        if one_line.chars().count() <= WIDTH {
            let _ = writeln!(out, "{one_line}");
        } else {
            out.push_str("        <doc:doc>\n          <doc:summary>\n");
            wrap(out, 12, &escape(&arg.summary));
            out.push_str("          </doc:summary>\n        </doc:doc>\n");
        }
        out.push_str("      </arg>\n");
    }
    let _ = writeln!(out, "    </{tag}>");
}

fn description(out: &mut String, indent: usize, paras: &[String]) {
    if paras.is_empty() {
        return;
    }
    let pad = " ".repeat(indent);
    let _ = writeln!(out, "{pad}<doc:doc>\n{pad}  <doc:description>");
    for para in paras {
        let _ = writeln!(out, "{pad}    <doc:para>");
        wrap(out, indent + 6, &escape(para));
        let _ = writeln!(out, "{pad}    </doc:para>");
    }
    let _ = writeln!(out, "{pad}  </doc:description>\n{pad}</doc:doc>");
}

/// `text` in lines of at most [`WIDTH`] characters (a longer word stands alone), each indented.
fn wrap(out: &mut String, indent: usize, text: &str) {
    for line in wrapped(text, WIDTH.saturating_sub(indent)) {
        let _ = writeln!(out, "{}{line}", " ".repeat(indent));
    }
}

fn wrapped(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One service's section of the reference page.
#[derive(Debug, Clone, Copy)]
pub struct Service<'a> {
    /// The file, relative to the repository root.
    pub file: &'a str,
    /// E.g. "`org.enginekit.Broker1` on the session bus".
    pub title: &'a str,
}

/// The API reference page (Markdown) for `services`, each with its parsed file.
pub fn render_markdown(services: &[(Service<'_>, &Document)]) -> String {
    let mut out = String::from("# D-Bus API reference\n\n");
    let files: Vec<String> = services
        .iter()
        .map(|(s, _)| format!("`{}`", s.file))
        .collect();
    let _ = writeln!(
        out,
        "{}\n",
        wrapped(
            &format!(
                "Generated from {} (the source of truth; each member's `<doc:doc>`) by \
                 `tests/tests/interface_xml.rs`: do not edit by hand. After changing the XML, \
                 `EK_BLESS=1 cargo test --workspace --test interface_xml` rewrites \
                 this page; the same test fails while it is out of date, and while a service's \
                 introspection differs from its file.",
                files.join(" and ")
            ),
            WIDTH
        )
        .join("\n")
    );
    for (service, doc) in services {
        let _ = writeln!(out, "## {}\n", service.title);
        for iface in &doc.interfaces {
            interface_markdown(&mut out, iface);
        }
    }
    out
}

fn interface_markdown(out: &mut String, iface: &Interface) {
    let _ = writeln!(out, "### Interface `{}`\n", iface.name);
    paras_markdown(out, &iface.doc);
    for (kind, heading) in [
        (Kind::Method, "Methods"),
        (Kind::Signal, "Signals"),
        (Kind::Property, "Properties"),
    ] {
        let members: Vec<&Member> = iface.members.iter().filter(|m| m.kind == kind).collect();
        if members.is_empty() {
            continue;
        }
        let _ = writeln!(out, "#### {heading}\n");
        for member in members {
            let _ = writeln!(out, "##### `{}`\n", synopsis(member));
            paras_markdown(out, &member.doc);
            for arg in &member.args {
                let direction = arg
                    .direction
                    .as_deref()
                    .map(|d| format!(", {d}"))
                    .unwrap_or_default();
                let summary = if arg.summary.is_empty() {
                    String::new()
                } else {
                    format!(": {}", arg.summary)
                };
                let item = format!("- `{}` (`{}`{direction}){summary}", arg.name, arg.signature);
                let lines = wrapped(&item, WIDTH);
                let _ = writeln!(out, "{}", lines.join("\n  "));
            }
            if !member.args.is_empty() {
                out.push('\n');
            }
        }
    }
}

fn synopsis(member: &Member) -> String {
    let args = |dir: Option<&str>| -> Vec<String> {
        member
            .args
            .iter()
            .filter(|a| a.direction.as_deref() == dir)
            .map(|a| format!("{} {}", a.signature, a.name))
            .collect()
    };
    match member.kind {
        Kind::Method => {
            let outs = args(Some("out"));
            let returns = if outs.is_empty() {
                String::new()
            } else {
                format!(" → ({})", outs.join(", "))
            };
            format!("{}({}){returns}", member.name, args(Some("in")).join(", "))
        }
        Kind::Signal => format!("{}({})", member.name, args(None).join(", ")),
        Kind::Property => format!("{} {} ({})", member.name, member.signature, member.access),
    }
}

fn paras_markdown(out: &mut String, paras: &[String]) {
    for para in paras {
        let _ = writeln!(out, "{}\n", wrapped(para, WIDTH).join("\n"));
    }
}

/// Where two texts first differ, with a few lines around, for a failure message.
pub fn first_difference(expected: &str, got: &str) -> String {
    let expected: Vec<&str> = expected.lines().collect();
    let got: Vec<&str> = got.lines().collect();
    let at = expected
        .iter()
        .zip(&got)
        .position(|(a, b)| a != b)
        .unwrap_or(expected.len().min(got.len()));
    let window = |lines: &[&str]| -> String {
        lines
            .iter()
            .enumerate()
            .skip(at.saturating_sub(2))
            .take(6)
            .map(|(i, l)| format!("{:5} | {l}\n", i + 1))
            .collect()
    };
    format!(
        "first difference at line {}\n--- expected\n{}--- file\n{}",
        at + 1,
        window(&expected),
        window(&got)
    )
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
<node xmlns:doc="http://www.freedesktop.org/dbus/1.0/doc.dtd">
  <interface name="org.example.A">
    <doc:doc><doc:description><doc:para>The   A
      interface &amp; more.</doc:para></doc:description></doc:doc>
    <method name="Do">
      <doc:doc><doc:description><doc:para>Does.</doc:para></doc:description></doc:doc>
      <arg name="x" type="s"><doc:doc><doc:summary>An x.</doc:summary></doc:doc></arg>
      <arg name="y" type="o" direction="out"/>
    </method>
    <property name="P" type="t" access="read"/>
    <signal name="S"><arg name="v" type="s"/></signal>
  </interface>
</node>
"#;

    #[test]
    fn a_file_reads_with_its_docs_and_renders_back_to_the_same_document() {
        let doc = parse(SAMPLE).expect("parse");
        let a = doc.interface("org.example.A").expect("A");
        assert_eq!(a.doc, vec!["The A interface & more.".to_owned()]);
        assert_eq!(
            a.shape(),
            vec![
                "method Do [x s in] [y o out]",
                "property P t read",
                "signal S [v s -]"
            ]
        );
        assert_eq!(a.members[0].args[0].summary, "An x.");
        assert_eq!(
            doc.undocumented(),
            vec!["org.example.A.P", "org.example.A.S"]
        );
        let text = render_xml(&doc);
        assert_eq!(parse(&text).expect("reparse"), doc);
        assert_eq!(render_xml(&parse(&text).expect("reparse")), text);
    }

    #[test]
    fn a_merge_takes_the_structure_from_the_service_and_the_docs_from_the_file() {
        let file = parse(SAMPLE).expect("parse");
        let live = parse(
            r#"<node><interface name="org.example.A">
                 <signal name="S"><arg name="v" type="s"/></signal>
                 <method name="Do"><arg name="x" type="s" direction="in"/>
                   <arg name="z" type="s" direction="out"/></method>
                 <method name="New"/>
               </interface></node>"#,
        )
        .expect("live");
        let merged = merge(&live.interfaces[0], file.interface("org.example.A"));
        let names: Vec<&str> = merged.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, vec!["Do", "S", "New"]);
        assert_eq!(merged.members[0].doc, vec!["Does.".to_owned()]);
        assert_eq!(merged.members[0].args[0].summary, "An x.");
        assert_eq!(merged.members[0].args[1].name, "z");
        assert!(merged.members[2].doc.is_empty());
    }

    #[test]
    fn the_reference_page_shows_each_member_with_its_signature() {
        let doc = parse(SAMPLE).expect("parse");
        let page = render_markdown(&[(
            Service {
                file: "a.xml",
                title: "A",
            },
            &doc,
        )]);
        assert!(page.contains("##### `Do(s x) → (o y)`"), "{page}");
        assert!(page.contains("- `x` (`s`, in): An x."), "{page}");
        assert!(page.contains("##### `P t (read)`"), "{page}");
    }
}
