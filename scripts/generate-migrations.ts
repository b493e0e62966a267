/** `npm run migrations:generate`: rewrites the embedded migrations module from the .sql files. */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { GENERATED_MODULE, renderMigrationsModule } from './migrations-module.js';

const root = fileURLToPath(new URL('..', import.meta.url));
writeFileSync(new URL(`../${GENERATED_MODULE}`, import.meta.url), renderMigrationsModule(root));
console.log(`wrote ${GENERATED_MODULE}`);
