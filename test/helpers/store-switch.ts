/**
 * Jest setup (jest.config.js `setupFiles`): with PLATFORM_TEST_STORE set (`.ci/run`'s NeDB pass), DOCUMENT_STORE
 * follows it unless given, so the platforms the tests start in child processes (test/helpers/nodes.ts, child.ts) and
 * whatever reads the configuration in process run on that store too; bootPlatform and STORES read the switch
 * themselves (test/helpers/platform.ts, tenants.ts).
 */
const store = process.env.PLATFORM_TEST_STORE;
if (store && !process.env.DOCUMENT_STORE) process.env.DOCUMENT_STORE = store;
