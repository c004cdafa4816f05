/**
 * Builds the browser console's bundle (console/ → console/dist/, runtime/console-page.ts): run by `npm install`
 * (`prepare`) and `npm run build`. `--into <dir>` also copies the built files to `<dir>/console/dist`, where the
 * compiled gateway of `npm run build` (dist/) looks for them.
 */
import { cpSync, rmSync } from "node:fs";
import { join } from "node:path";
import { buildConsole, consoleBuildReport } from "./runtime/console-page";

async function main(): Promise<void> {
	const started = Date.now();
	const built = await buildConsole(process.argv.includes("--force"));
	console.log(`console: ${built ? `built in ${Date.now() - started} ms` : "up to date"}\n${consoleBuildReport()}`);
	const i = process.argv.indexOf("--into");
	if (i > 0 && process.argv[i + 1]) {
		const target = join(process.argv[i + 1], "console", "dist");
		rmSync(target, { recursive: true, force: true });
		cpSync(join(__dirname, "console", "dist"), target, { recursive: true, filter: (src) => !src.includes(".build-") });
	}
}

main().catch((err: Error) => {
	console.error(`console: the build failed: ${err.message}`);
	process.exit(1);
});
