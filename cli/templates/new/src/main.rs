//! `{{name}} dev` serves the workflows on http://127.0.0.1:8080; on Lambda the same
//! binary is each of the four functions, picked by `SIESTA_ROLE`.

fn main() -> std::process::ExitCode {
    siesta_app::App::new({{crate}}::workflows())
        .build_id(siesta_app::build_id!())
        .main()
}
