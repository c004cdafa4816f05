/**
 * The gateway and the domains' services, by the name `SERVICES=` uses. The workers are workers/index.ts's
 * `workerCatalog`; a node's start (platform.ts, moleculer.config.ts) offers both.
 */
import type { ServiceSchema } from "moleculer";
import type { PlatformConfig } from "../runtime/config";
import { apiService } from "./api.service";
import AuthService from "./auth.service";
import DomainService from "./domain.service";
import ContextService from "./context.service";
import EssentialService from "./essential.service";
import FinancialService from "./financial.service";
import GeneralService from "./general.service";
import IdentityService from "./identity.service";
import SpecialService from "./special.service";
import TouchService from "./touch.service";
import ContentService from "./content.service";
import LogisticService from "./logistic.service";
import ConjointService from "./conjoint.service";
import CareerService from "./career.service";
import ThingService from "./thing.service";

export function serviceCatalog(cfg: PlatformConfig): Record<string, ServiceSchema> {
	return {
		api: apiService(cfg),
		auth: AuthService,
		domain: DomainService,
		context: ContextService,
		essential: EssentialService,
		financial: FinancialService,
		general: GeneralService,
		identity: IdentityService,
		special: SpecialService,
		touch: TouchService,
		content: ContentService,
		logistic: LogisticService,
		conjoint: ConjointService,
		career: CareerService,
		thing: ThingService,
	};
}
