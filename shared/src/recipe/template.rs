//! Source-file templates: literal text with a fixed set of `${name}` substitutions.
//!
//! Only the names in [`Var`] exist; anything else written `${…}` makes the recipe invalid. Text
//! such as `$(ARCH)`, `$basearch` and `$releasever` is not ours: apt and dnf expand it themselves.

/// A substitution a template may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// The machine architecture (`x86_64`, `aarch64`).
    Arch,
    /// The Debian architecture (`amd64`, `arm64`); apt only.
    DebArch,
    /// `ID` of os-release (`ubuntu`, `debian`, `fedora`).
    DistroId,
    /// `VERSION_ID` of os-release (`24.04`, `12`, `41`).
    VersionId,
    /// The suite the recipe maps the version to (`noble`); apt only.
    VersionCodename,
    /// The vendors' repository name of the distribution (`fedora`, `rhel`); dnf only.
    RepositoryDistro,
}

impl Var {
    fn parse(name: &str) -> Option<Var> {
        Some(match name {
            "arch" => Var::Arch,
            "deb_arch" => Var::DebArch,
            "distro_id" => Var::DistroId,
            "version_id" => Var::VersionId,
            "version_codename" => Var::VersionCodename,
            "repository_distro" => Var::RepositoryDistro,
            _ => return None,
        })
    }
}

/// A template that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unknown substitution ${{{0}}}")]
    UnknownVar(String),
    #[error("an unterminated ${{")]
    Unterminated,
    #[error("the substitution ${{{0}}} is not available here")]
    Unavailable(&'static str),
}

enum Piece<'a> {
    Text(&'a str),
    Var(Var),
}

fn pieces(template: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push(Piece::Text(&rest[..start]));
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(TemplateError::Unterminated)?;
        let name = &after[..end];
        out.push(Piece::Var(
            Var::parse(name).ok_or_else(|| TemplateError::UnknownVar(name.to_string()))?,
        ));
        rest = &after[end + 1..];
    }
    out.push(Piece::Text(rest));
    Ok(out)
}

/// The substitution values for one host.
#[derive(Debug, Clone)]
pub struct Values<'a> {
    pub arch: &'a str,
    pub deb_arch: Option<&'a str>,
    pub distro_id: &'a str,
    pub version_id: &'a str,
    pub version_codename: Option<&'a str>,
    pub repository_distro: Option<&'a str>,
}

/// Renders a template; a substitution without a value here is an error, never an empty string.
pub fn render(template: &str, values: &Values<'_>) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len() + 32);
    for piece in pieces(template)? {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Var(Var::Arch) => out.push_str(values.arch),
            Piece::Var(Var::DistroId) => out.push_str(values.distro_id),
            Piece::Var(Var::VersionId) => out.push_str(values.version_id),
            Piece::Var(Var::DebArch) => out.push_str(
                values
                    .deb_arch
                    .ok_or(TemplateError::Unavailable("deb_arch"))?,
            ),
            Piece::Var(Var::VersionCodename) => out.push_str(
                values
                    .version_codename
                    .ok_or(TemplateError::Unavailable("version_codename"))?,
            ),
            Piece::Var(Var::RepositoryDistro) => out.push_str(
                values
                    .repository_distro
                    .ok_or(TemplateError::Unavailable("repository_distro"))?,
            ),
        }
    }
    Ok(out)
}

/// Checks a template's syntax and that it uses only the substitutions a family provides.
pub fn check(template: &str, apt: bool) -> Result<(), TemplateError> {
    for piece in pieces(template)? {
        match piece {
            Piece::Var(Var::DebArch) if !apt => return Err(TemplateError::Unavailable("deb_arch")),
            Piece::Var(Var::VersionCodename) if !apt => {
                return Err(TemplateError::Unavailable("version_codename"))
            }
            Piece::Var(Var::RepositoryDistro) if apt => {
                return Err(TemplateError::Unavailable("repository_distro"))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values<'static> {
        Values {
            arch: "x86_64",
            deb_arch: Some("amd64"),
            distro_id: "ubuntu",
            version_id: "24.04",
            version_codename: Some("noble"),
            repository_distro: None,
        }
    }

    #[test]
    fn substitutes_known_names_and_leaves_package_manager_variables() {
        let out = render(
            "deb [arch=${deb_arch}] x/${distro_id} ${version_codename} $(ARCH) $basearch\n",
            &values(),
        );
        assert_eq!(
            out.unwrap(),
            "deb [arch=amd64] x/ubuntu noble $(ARCH) $basearch\n"
        );
    }

    #[test]
    fn refuses_unknown_and_unterminated_names() {
        assert_eq!(
            render("${user}", &values()),
            Err(TemplateError::UnknownVar("user".into()))
        );
        assert_eq!(
            render("a ${arch", &values()),
            Err(TemplateError::Unterminated)
        );
        assert_eq!(
            check("${version_codename}", false),
            Err(TemplateError::Unavailable("version_codename"))
        );
        assert!(check("${version_codename}", true).is_ok());
        assert_eq!(
            check("${repository_distro}", true),
            Err(TemplateError::Unavailable("repository_distro"))
        );
        assert!(check("${repository_distro}", false).is_ok());
    }

    #[test]
    fn the_repository_distro_is_the_vendors_name_of_the_distribution() {
        let rocky = Values {
            arch: "x86_64",
            deb_arch: None,
            distro_id: "rocky",
            version_id: "9.4",
            version_codename: None,
            repository_distro: Some("rhel"),
        };
        assert_eq!(
            render("linux/${repository_distro}/$releasever/$basearch", &rocky).unwrap(),
            "linux/rhel/$releasever/$basearch"
        );
        assert_eq!(
            render("${repository_distro}", &values()),
            Err(TemplateError::Unavailable("repository_distro"))
        );
    }
}
