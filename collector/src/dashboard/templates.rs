//! The page templates, compiled into the binary so the dashboard needs no
//! build step and no files next to the executable (its CSS and JavaScript
//! are embedded by `build.rs` and served by `assets`).

use std::sync::OnceLock;

use minijinja::{Environment, Value};
use warp::reply::Response;

use crate::error::ApiError;

const TEMPLATES: &[(&str, &str)] = &[
    ("layout.html", include_str!("templates/layout.html")),
    ("error.html", include_str!("templates/error.html")),
    ("form_errors.html", include_str!("templates/form_errors.html")),
    ("login.html", include_str!("templates/login.html")),
    ("sites.html", include_str!("templates/sites.html")),
    ("site.html", include_str!("templates/site.html")),
    ("keys.html", include_str!("templates/keys.html")),
    ("wall.html", include_str!("templates/wall.html")),
    ("wall_preview.html", include_str!("templates/wall_preview.html")),
    ("site_tabs.html", include_str!("templates/site_tabs.html")),
    ("export.html", include_str!("templates/export.html")),
    ("integrations.html", include_str!("templates/integrations.html")),
    ("site_settings.html", include_str!("templates/site_settings.html")),
    ("report_summary.html", include_str!("templates/report_summary.html")),
    ("report_form.html", include_str!("templates/report_form.html")),
    ("reports.html", include_str!("templates/reports.html")),
    ("report.html", include_str!("templates/report.html")),
];

fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        for (name, source) in TEMPLATES {
            // The templates are part of the binary; a broken one fails the unit test below.
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "dashboard template does not compile");
            }
        }
        env
    })
}

pub fn render(name: &str, ctx: Value) -> Result<String, ApiError> {
    env()
        .get_template(name)
        .and_then(|t| t.render(ctx))
        .map_err(|e| ApiError::internal(format!("rendering {name}: {e:#}")))
}

/// GET /dashboard/assets/:name
pub fn asset(name: String) -> Result<Response, ApiError> {
    crate::assets::dashboard_file(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_compiles() {
        let mut env = Environment::new();
        for (name, source) in TEMPLATES {
            env.add_template(name, source).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
    }
}
