/** The operator's REPL (`npm run repl`, `moleculer-runner --repl`): moleculer-repl with the platform's commands. */
import type { Platform } from "../platform";

export function startRepl(platform: Platform): void {
	platform.broker.repl();
}
