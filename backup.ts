/**
 * `npm run backup -- <file>` (in the image: `node dist/backup.js <file>`): a consistent backup of the PostgreSQL store
 * (DATABASE_URL, else DATA_DIR's embedded PostgreSQL), taken while the platform runs, with its file content and
 * DATA_DIR's keys (data-backup.ts; docs/production.md, "Backup and restore").
 */
import { command } from "./data-backup";

command("backup", process.argv.slice(2)).then((code) => process.exit(code));
