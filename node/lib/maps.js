'use strict'
// Small bounded maps shared by the adapters.

/**
 * Sets `key` to `value` as the newest entry of `map` (insertion order), then drops the oldest
 * entries past `cap`: a least-recently-set cache with a bound.
 */
function remember(map, key, value, cap) {
  map.delete(key)
  map.set(key, value)
  if (map.size > cap) map.delete(map.keys().next().value)
}

module.exports = { remember }
