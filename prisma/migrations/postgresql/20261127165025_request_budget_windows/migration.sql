-- CreateTable
CREATE TABLE "RequestBudgetWindow" (
    "key" TEXT NOT NULL,
    "windowStart" TIMESTAMP(3) NOT NULL,
    "count" INTEGER NOT NULL,

    CONSTRAINT "RequestBudgetWindow_pkey" PRIMARY KEY ("key","windowStart")
);

-- CreateIndex
CREATE INDEX "RequestBudgetWindow_windowStart_idx" ON "RequestBudgetWindow"("windowStart");
