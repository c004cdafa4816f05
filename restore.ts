/**
 * `npm run restore -- <file>` (in the image: `node dist/restore.js <file>`): a backup of `npm run backup` into an
 * empty DATA_DIR or database (data-backup.ts; docs/production.md, "Backup and restore"); start the platform on it
 * once the restore is done.
 */
import { command } from "./data-backup";

command("restore", process.argv.slice(2)).then((code) => process.exit(code));
