//! The install list: the one place that names the features. Adding one is its folder and a line
//! here (`docs/ARCHITECTURE.md` → Adding a feature); [`crate::app`] builds the service from it,
//! [`crate::schema`] the migrations and [`crate::cli`] the commands.

use platform::feature::Feature;

use crate::{
    account, article, auth, backup, comment, console, db_move, events_admin, feed, interactive,
    jobs, live_settings, moderation, notifications, payment, phone_login, ranking, reward,
    screening, search, site, sms, tag, user, wechat_login,
};

/// Every feature, in install order: a feature comes after those whose services it needs
/// ([`platform::feature::check_wiring`] checks it before anything opens).
pub const FEATURES: &[&dyn Feature] = &[
    // First: a data dir with an unfinished restore serves nothing (it refuses to start).
    &backup::Backup,
    // Then the stored live settings apply before any feature reads the configuration.
    &live_settings::LiveSettingsFeature,
    &auth::Auth,
    &user::Users,
    &sms::Sms,
    &phone_login::PhoneLogin,
    &wechat_login::WechatLogin,
    &interactive::Interactive,
    // Before the features that write text: they screen it.
    &screening::ScreeningFeature,
    &article::Articles,
    &ranking::Ranking,
    &feed::Feed,
    &comment::Comments,
    &tag::Tags,
    &search::Search,
    &moderation::Moderation,
    &account::Accounts,
    &payment::Payments,
    &reward::Rewards,
    // After every feature whose events it consumes (comments, likes, follows, rewards).
    &notifications::Notifications,
    // After every feature with executors: it checks new jobs against every one registered.
    &jobs::Jobs,
    &events_admin::EventsAdmin,
    &console::Console,
    // After the console: its pages are the console's document, filled in.
    &site::Site,
    // Last: it routes the database every other feature uses during an online move.
    &db_move::DbMove,
];

#[cfg(test)]
mod tests {
    /// Every service a feature needs comes from a feature earlier in the list (what
    /// `App::build` checks before opening anything).
    #[test]
    fn the_install_list_is_wired() {
        platform::feature::check_wiring(super::FEATURES).unwrap();
    }
}
