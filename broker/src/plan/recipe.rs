//! The one place the plan learns which recipe a host step would run: the built-in one, or a
//! newer signed one from the document folder, which then travels inline in the step.

use std::collections::{BTreeMap, BTreeSet};

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::recipe::{ActionSpec, Component, Recipe};
use enginekit_shared::wire::host_step::{
    HostParameters, HostRequest, RecipeId, RecipeIdParseError,
};
use enginekit_shared::wire::plan::{SystemChange, SystemChangeCode};
use serde_json::Value;

use crate::documents::store::DocumentSet;
use crate::i18n::tr;

/// The recipe a plan names: its id, the digest of its payload and, for a recipe that is not
/// compiled into the helper, the signed envelope the step carries.
#[derive(Debug, Clone)]
pub struct RecipeRef {
    pub(crate) id: String,
    pub(crate) digest: Digest,
    /// The recipe itself: what it serves is asked of it ([`Recipe::target_for`]).
    pub(crate) recipe: Recipe,
    /// `{payload, signatures}`; `None` for the built-in recipe.
    pub(crate) inline: Option<Value>,
    /// For a recipe that is not the built-in one: its serial and where each of its repositories
    /// points, by `(family, vendor)` (`apt`/`dnf`, `docker`/`nvidia`), so that the plan a person
    /// consents to names the repository that will really be added.
    pub(crate) signed_sources: Option<SignedSources>,
}

/// Where a signed recipe's repositories are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignedSources {
    pub(crate) serial: u64,
    /// `(family, vendor)` → every place its source files point at (usually one).
    pub(crate) locations: BTreeMap<(String, String), BTreeSet<String>>,
    /// `(family, vendor)` → the packages it installs for that vendor's component, as
    /// `name` or `name version` when pinned.
    pub(crate) packages: BTreeMap<(String, String), Vec<String>>,
}

/// The vendor of a component's repository and packages (the plan's `vendor` param); Podman's
/// packages come from the distribution's archive and have no repository of their own.
fn vendor_of(component: &Component) -> Option<&'static str> {
    match component {
        Component::DockerEngine => Some("docker"),
        Component::NvidiaContainerToolkit => Some("nvidia"),
        Component::Podman => Some("podman"),
        _ => None,
    }
}

/// Every action of `recipe` with its family (`apt`, `dnf`).
fn actions_by_family(recipe: &Recipe) -> impl Iterator<Item = (&'static str, &ActionSpec)> {
    let body = recipe.body();
    let apt = body.apt.actions.iter().map(|a| ("apt", a));
    let dnf = body.dnf.actions.iter().map(|a| ("dnf", a));
    apt.chain(dnf)
}

/// `(family, vendor) → packages` of every install-packages action of `recipe`.
fn packages_of(recipe: &Recipe) -> BTreeMap<(String, String), Vec<String>> {
    let mut packages: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (family, action) in actions_by_family(recipe) {
        let ActionSpec::InstallPackages {
            packages: specs, ..
        } = action
        else {
            continue;
        };
        for spec in specs {
            let Some(vendor) = vendor_of(&spec.component) else {
                continue;
            };
            let shown = match &spec.version {
                Some(version) => format!("{} {version}", spec.name),
                None => spec.name.clone(),
            };
            packages
                .entry((family.to_owned(), vendor.to_owned()))
                .or_default()
                .push(shown);
        }
    }
    packages
}

/// Who serves the repositories a source template points at: the location of each URL in it
/// (`deb [...] URL suite` for apt; `baseurl=`, `gpgkey=` ... for dnf), read by the shared
/// [`source_urls`](enginekit_shared::recipe::sources::source_urls) as the helper reads the
/// rendered file.
fn template_locations(template: &str) -> BTreeSet<String> {
    enginekit_shared::recipe::sources::source_urls(template)
        .iter()
        .filter_map(|u| u.location())
        .collect()
}

/// `(family, vendor) → locations` of every write-source action of `recipe`.
fn sources_of(recipe: &Recipe) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut sources: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (family, action) in actions_by_family(recipe) {
        let ActionSpec::WriteSource {
            component,
            template,
            ..
        } = action
        else {
            continue;
        };
        let Some(vendor) = vendor_of(component) else {
            continue;
        };
        sources
            .entry((family.to_owned(), vendor.to_owned()))
            .or_default()
            .extend(template_locations(template));
    }
    sources
}

/// The compiled-in recipe of this build.
pub fn builtin() -> Result<RecipeRef, CodedError> {
    let recipe = enginekit_shared::recipe::builtin()
        .map_err(|e| CodedError::new(e.code(), e.to_string()))?;
    Ok(RecipeRef {
        id: recipe.id().to_owned(),
        digest: recipe.digest().clone(),
        recipe: recipe.clone(),
        inline: None,
        signed_sources: None,
    })
}

/// The recipe in charge for `documents`: a newer signed one when accepted, else the built-in.
pub(crate) fn in_charge(documents: &DocumentSet) -> Result<RecipeRef, CodedError> {
    match &documents.recipe {
        Some(signed) => Ok(RecipeRef {
            id: signed.recipe.id().to_owned(),
            digest: signed.recipe.digest().clone(),
            recipe: signed.recipe.clone(),
            inline: Some(signed.envelope.clone()),
            signed_sources: Some(SignedSources {
                serial: signed.recipe.serial(),
                locations: sources_of(&signed.recipe),
                packages: packages_of(&signed.recipe),
            }),
        }),
        None => builtin(),
    }
}

/// What the host step will ask for validated parameters: the recipe's id and digest (and its
/// envelope when inline). No nonce: the step is issued from this when the consented setup hands
/// it to the helper.
pub(crate) fn host_request(
    recipe: &RecipeRef,
    parameters: HostParameters,
) -> Result<HostRequest, CodedError> {
    let recipe_id: RecipeId = recipe.id.parse().map_err(|e: RecipeIdParseError| {
        CodedError::new(ErrorCode::HostStepInvalid, e.to_string())
    })?;
    HostRequest::new(
        recipe_id,
        recipe.digest.clone(),
        recipe.inline.clone(),
        parameters,
    )
    .map_err(|e| CodedError::new(e.code(), e.to_string()))
}

/// With a recipe that is not the built-in one, each "add repository" change says where that
/// recipe's repository really is (the built-in texts name NVIDIA's and Docker's own sites).
pub(crate) fn name_signed_sources(recipe: &RecipeRef, changes: &mut [SystemChange]) {
    let Some(SignedSources {
        serial,
        locations,
        packages,
    }) = &recipe.signed_sources
    else {
        return;
    };
    name_signed_packages(*serial, packages, changes);
    for change in changes
        .iter_mut()
        .filter(|c| c.code == SystemChangeCode::AddRepository)
    {
        let (Some(family), Some(vendor)) = (change.param("family"), change.param("vendor")) else {
            continue;
        };
        let what = match vendor {
            "docker" => "Docker",
            _ => "NVIDIA Container Toolkit",
        };
        // TRANSLATORS: {what} is Docker or NVIDIA Container Toolkit, {family} apt or dnf,
        // {places} the repositories' hosts.
        let named = locations
            .get(&(family.to_owned(), vendor.to_owned()))
            .filter(|l| !l.is_empty())
            .map(|l| l.iter().cloned().collect::<Vec<_>>().join(", "));
        change.text = match named {
            Some(places) => tr!(
                "Add the {what} {family} repository and signing key named by the signed recipe (serial {serial}): {places}.",
                what = what,
                family = family,
                serial = serial,
                places = places
            ),
            // Never the built-in text, which names another site.
            None => tr!(
                "Add the {what} {family} repository and signing key as named by the signed recipe (serial {serial}).",
                what = what,
                family = family,
                serial = serial
            ),
        };
    }
}

/// With a signed recipe, "install the missing packages" lists what that recipe really installs
/// for the vendors the plan needs (every package, with its pinned version), not only the
/// reference's package names.
fn name_signed_packages(
    serial: u64,
    packages: &BTreeMap<(String, String), Vec<String>>,
    changes: &mut [SystemChange],
) {
    // The family and the vendors come from the plan's add-repository changes, and from an
    // install of packages of the distribution's archive (Podman's), which names its own.
    let mut family = None;
    let mut vendors = Vec::new();
    for change in changes.iter().filter(|c| {
        c.code == SystemChangeCode::AddRepository || c.code == SystemChangeCode::InstallPackages
    }) {
        if let (Some(f), Some(v)) = (change.param("family"), change.param("vendor")) {
            family = Some(f.to_owned());
            vendors.push(v.to_owned());
        }
    }
    let Some(family) = family else {
        return;
    };
    let listed: Vec<String> = vendors
        .iter()
        .filter_map(|v| packages.get(&(family.clone(), v.clone())))
        .flatten()
        .cloned()
        .collect();
    if listed.is_empty() {
        return;
    }
    for change in changes
        .iter_mut()
        .filter(|c| c.code == SystemChangeCode::InstallPackages)
    {
        change.text = tr!(
            "Install the missing packages as the signed recipe (serial {serial}) names them: {packages}.",
            serial = serial,
            packages = listed.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::template_locations;

    #[test]
    fn a_signed_recipe_names_podmans_packages_too_even_without_a_repository_to_add() {
        use enginekit_shared::wire::plan::{SystemChange, SystemChangeCode};
        let packages = std::collections::BTreeMap::from([
            (
                ("apt".into(), "podman".into()),
                vec!["podman".into(), "crun 1.8".into()],
            ),
            (
                ("apt".into(), "nvidia".into()),
                vec!["nvidia-container-toolkit".into()],
            ),
        ]);
        let install = |with_vendor: bool| {
            let c = SystemChange::new(SystemChangeCode::InstallPackages, "built-in names")
                .with_param("packages", "podman");
            match with_vendor {
                true => c.with_param("vendor", "podman").with_param("family", "apt"),
                false => c,
            }
        };
        // Podman alone: no add-repository change, the install names its family and vendor.
        let mut changes = vec![install(true)];
        super::name_signed_packages(7, &packages, &mut changes);
        assert_eq!(
            changes[0].text,
            "Install the missing packages as the signed recipe (serial 7) names them: podman, crun 1.8."
        );
        // With the toolkit's repository: both vendors' packages.
        let repository = SystemChange::new(SystemChangeCode::AddRepository, "repo")
            .with_param("vendor", "nvidia")
            .with_param("family", "apt");
        let mut changes = vec![repository.clone(), install(true)];
        super::name_signed_packages(7, &packages, &mut changes);
        assert!(
            changes[1]
                .text
                .ends_with("nvidia-container-toolkit, podman, crun 1.8."),
            "{}",
            changes[1].text
        );
        // Docker's path names no vendor on its install: only the repositories' vendors count.
        let mut changes = vec![repository, install(false)];
        super::name_signed_packages(7, &packages, &mut changes);
        assert!(changes[1].text.ends_with(": nvidia-container-toolkit."));
    }

    #[test]
    fn template_locations_name_who_serves_each_url() {
        let cases: [(&str, &[&str]); 6] = [
            (
                "deb [signed-by=/usr/share/keyrings/k.gpg] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n",
                &["https://nvidia.github.io"],
            ),
            (
                "[x]\nname=x\ngpgkey=https://keys.example.com/k.asc\nbaseurl=https://mirror.example.org/rpm/$basearch\nenabled=1\n",
                &["https://keys.example.com", "https://mirror.example.org"],
            ),
            (
                "deb [arch=${deb_arch}] https://download.docker.com/linux/${distro_id} ${version_codename} stable",
                &["https://download.docker.com"],
            ),
            (
                "deb https://download.docker.com@evil.example/linux stable",
                &["https://download.docker.com@evil.example"],
            ),
            (
                "deb file:///srv/repo/stable/deb/$(ARCH) /",
                &["file:///srv/repo/stable/deb"],
            ),
            ("no url here", &[]),
        ];
        for (template, want) in cases {
            let got: Vec<String> = template_locations(template).into_iter().collect();
            assert_eq!(got, want, "{template}");
        }
    }
}
