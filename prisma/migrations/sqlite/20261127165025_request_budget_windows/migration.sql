-- CreateTable
CREATE TABLE "RequestBudgetWindow" (
    "key" TEXT NOT NULL,
    "windowStart" DATETIME NOT NULL,
    "count" INTEGER NOT NULL,

    PRIMARY KEY ("key", "windowStart")
);

-- CreateIndex
CREATE INDEX "RequestBudgetWindow_windowStart_idx" ON "RequestBudgetWindow"("windowStart");
