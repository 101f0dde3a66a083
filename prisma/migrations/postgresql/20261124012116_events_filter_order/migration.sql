-- DropIndex
DROP INDEX "Event_accountId_resourceType_resourceId_idx";

-- CreateIndex
CREATE INDEX "Event_accountId_resourceType_sequence_idx" ON "Event"("accountId", "resourceType", "sequence");

-- CreateIndex
CREATE INDEX "Event_accountId_resourceType_resourceId_sequence_idx" ON "Event"("accountId", "resourceType", "resourceId", "sequence");
