"""attnspec's own tests, by area (never shipped): impl/ (the reference implementation's own API),
specs/ (the oracle, mods, tolerance), kit/ (the kit's helpers and target loading), targets/ (the kit
against correct and broken outside targets), runner/ (the commands, the plugin, the wheel),
mutation/ (the engine and the catalogue's idioms), campaigns/ (the repository's campaigns), and
fixtures/ (what they share: broken twins, toys, kit runs)."""
