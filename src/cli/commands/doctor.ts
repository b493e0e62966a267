import { type DoctorReport, diagnose, type Finding } from '../../store/postgres/admin.js';
import { defineCommand } from '../command.js';
import { EXIT } from '../usage.js';

/** `sideeffect doctor`: one report of what the store needs, each finding with its next step. */
export const doctor = defineCommand({
  name: 'doctor',
  summary:
    "what the store needs, in one report: replication and synchronous_commit (can a failover apply an effect twice?), the schema against this version's, roles, clock",
  usage: ['sideeffect doctor [-o json]'],
  about: `Reads, changes nothing: the server's replication (asynchronous standbys or an idle
replication slot without synchronous_standby_names lose acknowledged commits in a failover, and
an effect recorded in one is applied twice) and synchronous_commit as the store's role sees it;
the schema's migrations and its catalog (columns, functions with their security settings and
bodies, triggers, indexes) against what this version's migrations create, built in a scratch
schema that is rolled back (needs CREATE on the database: run it as the schema's owner); the
roles holding rights on the schema against what their kind needs; the database clock against
this machine's. Each finding says what to do next.`,
  options: {},
  notes: 'Exit codes: 0 nothing at risk, 1 something at risk (each RISK line says what to do).',
  parse: () => ({}),
  async run(_, ctx) {
    const report = await diagnose(ctx.database().pool, { schema: ctx.schema });
    ctx.print(printReport(report), {
      host: report.host,
      schema: report.schema,
      atRisk: report.atRisk,
      replication: { mode: report.replication.mode, ...report.replication.facts },
      clock: report.clock,
      findings: report.findings,
    });
    return report.atRisk ? EXIT.refused : EXIT.ok;
  },
});

const LABEL: Record<Finding['status'], string> = {
  ok: 'ok       ',
  note: 'note     ',
  risk: 'RISK     ',
  unchecked: 'unchecked',
};

function printReport(report: DoctorReport): string {
  const risks = report.findings.filter((f) => f.status === 'risk').length;
  return [
    `sideeffect doctor: ${report.host}, schema ${report.schema}`,
    ...report.findings.flatMap((f) => [
      `  ${LABEL[f.status]}  ${f.area.padEnd(18)}  ${f.message}`,
      ...(f.next ? [`  ${' '.repeat(9)}  ${' '.repeat(18)}  next: ${f.next}`] : []),
    ]),
    risks > 0
      ? `${risks} finding(s) at risk: fix them (see "next"), then run sideeffect doctor again`
      : 'nothing at risk',
  ].join('\n');
}
